#include "common/result.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <string>
#include <thread>
#include <vector>

// Counts operator new calls made while a test has counting on; this binary replaces the global
// allocation functions, so every allocation from the code under test passes through here.
namespace {
std::atomic<bool> g_counting{false};
std::atomic<int> g_allocations{0};

void* CountedAlloc(size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) std::abort();
  return p;
}

// Counts allocations made by `body`.
template <typename F>
int AllocationsIn(F&& body) {
  g_allocations.store(0);
  g_counting.store(true);
  body();
  g_counting.store(false);
  return g_allocations.load();
}
}  // namespace

void* operator new(size_t n) { return CountedAlloc(n); }
void* operator new[](size_t n) { return CountedAlloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace hami {
namespace {

// Keeps the compiler from proving an Error dead and removing the code under measurement.
template <typename T>
void Keep(T& v) {
  asm volatile("" : : "r"(&v) : "memory");
}

Result<int> Refuse() { return Error(ErrorCode::kBusy, "device mutex held", EBUSY); }

Status Forward() {
  int v = HAMI_TRY(Refuse());
  (void)v;
  return OkStatus();
}

TEST(Error, LiteralErrnoCopyMoveAndResultDoNotAllocate) {
  int n = AllocationsIn([] {
    Error e(ErrorCode::kInvalidArgument, "limit is not a number", EINVAL);
    Error copy(e);
    Error moved(std::move(copy));
    Error assigned(ErrorCode::kIo, "x");
    assigned = moved;
    assigned = std::move(moved);
    Result<int> r = e;
    Result<int> r2 = r;
    Status s = Forward();
    Keep(e);
    Keep(assigned);
    Keep(r2);
    Keep(s);
  });
  EXPECT_EQ(n, 0);
}

TEST(Error, ContextWithinTheBoundDoesNotAllocate) {
  std::string_view text;
  Error e(ErrorCode::kIo, "x");
  int n = AllocationsIn([&] {
    e = Error(ErrorCode::kNotFound, "no such device").Context("cuDeviceGet").Context("admission");
    e = Error::FromErrno("open /tmp/vgpulock/lock.0", ENOENT).Context("joining region");
    text = e.text();
    Keep(text);
  });
  EXPECT_EQ(n, 0);
  EXPECT_EQ(text, "joining region: open /tmp/vgpulock/lock.0: No such file or directory");
  EXPECT_STREQ(e.c_str(), "joining region: open /tmp/vgpulock/lock.0: No such file or directory");
  EXPECT_EQ(e.code(), ErrorCode::kIo);
  EXPECT_EQ(e.sys_errno(), ENOENT);
  EXPECT_FALSE(e.truncated());
}

TEST(Error, FormatPutsValuesInlineWithoutAllocating) {
  Error e(ErrorCode::kIo, "x");
  int n = AllocationsIn([&] {
    e = Error::Format(ErrorCode::kInvalidArgument, 0, "HAMI_LIMIT_%d='%s': not a size", 3, "12Q");
  });
  EXPECT_EQ(n, 0);
  EXPECT_EQ(e.text(), "HAMI_LIMIT_3='12Q': not a size");
}

TEST(Error, BoundedTextIsCutWithAVisibleMarkerAtACharacterBoundary) {
  // "opening: " + path, with an "é" whose second byte is where the marker would start.
  constexpr size_t kPrefix = sizeof("opening: ") - 1;
  constexpr size_t kCut = Error::kInlineCapacity - Error::kTruncationMarker.size();
  std::string path(300, 'p');
  path[kCut - 1 - kPrefix] = '\xc3';
  path[kCut - kPrefix] = '\xa9';
  Error e(ErrorCode::kIo, "x");
  int n = AllocationsIn([&] { e = Error::FromErrno(path, EACCES).Context("opening"); });
  EXPECT_EQ(n, 0);
  EXPECT_TRUE(e.truncated());
  std::string_view t = e.text();
  ASSERT_LE(t.size(), Error::kInlineCapacity);
  EXPECT_TRUE(t.starts_with("opening: ppp"));
  EXPECT_TRUE(t.ends_with(Error::kTruncationMarker)) << t;
  // The cut backed up over the two-byte character rather than splitting it.
  EXPECT_EQ(t.find('\xa9'), std::string_view::npos);
  EXPECT_EQ(t.size(), Error::kInlineCapacity - 4 + Error::kTruncationMarker.size());
}

TEST(Error, FormatLongerThanTheBufferIsCut) {
  std::string value(400, 'v');
  Error e = Error::Format(ErrorCode::kInvalidArgument, 0, "bad value '%s'", value.c_str());
  EXPECT_TRUE(e.truncated());
  EXPECT_EQ(e.text().size(), Error::kInlineCapacity);
  EXPECT_TRUE(e.text().ends_with(Error::kTruncationMarker));
}

TEST(Error, UnboundedTextFromAStringIsKeptWhole) {
  std::string body(1000, 'b');
  Error e = Error(ErrorCode::kUnavailable, "HTTP 503: " + body).Context("listing pods");
  EXPECT_FALSE(e.truncated());
  EXPECT_EQ(e.message(), "listing pods: HTTP 503: " + body);
  // A short one stays inline until a Context outgrows the buffer, then moves whole.
  Error s = Error(ErrorCode::kUnavailable, std::string("short")).Context(body);
  EXPECT_EQ(s.text(), body + ": short");
  Error copy = s;
  EXPECT_EQ(copy.message(), s.message());
}

TEST(Error, MessageIsAStringUsableAsBefore) {
  Error e(ErrorCode::kNotFound, "no profile 'x'");
  const std::string& m = e.message();
  EXPECT_EQ(m, "no profile 'x'");
  EXPECT_EQ(&m, &e.message());  // made once
  std::string_view v = e.message();
  EXPECT_EQ(v, e.text());
  Error moved = std::move(e);
  EXPECT_EQ(moved.message() + "!", "no profile 'x'!");
}

TEST(Error, MessageFromManyThreadsIsMadeOnce) {
  Error e(ErrorCode::kNotFound, "shared");
  std::vector<const std::string*> seen(8);
  {
    std::vector<std::jthread> threads;
    for (size_t i = 0; i < seen.size(); ++i) {
      threads.emplace_back([&, i] { seen[i] = &e.message(); });
    }
  }
  for (const std::string* s : seen) EXPECT_EQ(s, seen[0]);
}

TEST(Error, UnknownErrnoIsNamedByNumber) {
  EXPECT_EQ(Error::FromErrno("ioctl", 9999).text(), "ioctl: Unknown error 9999");
}

TEST(Error, HasTheDocumentedSize) { EXPECT_EQ(sizeof(Error), 256u); }

}  // namespace
}  // namespace hami
