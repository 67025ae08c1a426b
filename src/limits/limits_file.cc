#include "limits/limits_file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common/cleanup.h"
#include "common/clock.h"
#include "common/file.h"
#include "common/unique_fd.h"

namespace hami::limits {

namespace {

Error BadEntry(std::string_view key, std::string_view why) {
  return Error(ErrorCode::kInvalidArgument,
               "limits-file entry '" + std::string(key.substr(0, 80)) + "': " + std::string(why));
}

// ".<base>.tmp-XXXXXX" with a random suffix.
std::string TempName(std::string_view base) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char bytes[6] = {};
  if (getrandom(bytes, sizeof(bytes), GRND_NONBLOCK) != ssize_t(sizeof(bytes))) {
    // No entropy yet (early boot): the PID and the address of a local still differ between
    // writers, and O_EXCL settles the rest.
    uint64_t v = uint64_t(getpid()) * uint64_t{0x9e3779b97f4a7c15} ^ uint64_t(uintptr_t(&bytes));
    for (unsigned char& b : bytes) b = static_cast<unsigned char>(v >>= 8);
  }
  std::string name = "." + std::string(base) + ".tmp-";
  for (unsigned char b : bytes) name += kAlphabet[b % (sizeof(kAlphabet) - 1)];
  return name;
}

// Takes an OFD lock of `type` (F_RDLCK, F_WRLCK) on the whole of `fd`, trying again every
// millisecond up to kLockWaitNs; 0, or the errno that stopped it (EAGAIN: still held).
int LockWhole(int fd, short type) {
  const int64_t deadline = MonotonicNs() + kLockWaitNs;
  for (;;) {
    struct flock l {};
    l.l_type = type;
    l.l_whence = SEEK_SET;
    if (fcntl(fd, F_OFD_SETLK, &l) == 0) return 0;
    if (errno != EAGAIN && errno != EACCES && errno != EINTR) return errno;
    if (MonotonicNs() >= deadline) return EAGAIN;
    SleepForNs(1'000'000);
  }
}

// The whole file, read under a shared lock (held until the descriptor closes).
Result<std::string> ReadLocked(const std::string& path) {
  UniqueFd fd = HAMI_TRY(OpenRegularFile(path, O_RDONLY));
  if (int err = LockWhole(fd.get(), F_RDLCK); err != 0) {
    return Error(ErrorCode::kIo,
                 path + ": " +
                     (err == EAGAIN ? std::string("a rewrite held the file for 2 s; not read")
                                    : std::string("locking it to read: ") + std::strerror(err)),
                 err);
  }
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error::FromErrno("read " + path);
    }
    if (n == 0) break;
    if (out.size() + size_t(n) > kMaxFileBytes) {
      return Error(ErrorCode::kInvalidArgument,
                   path + ": larger than " + std::to_string(kMaxFileBytes) + " bytes");
    }
    out.append(buf, size_t(n));
  }
  return out;
}

}  // namespace

bool IsValidKey(std::string_view key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

LimitsFile ParseLimitsFile(std::string_view text, std::string_view path) {
  LimitsFile out;
  out.present = true;
  out.path = std::string(path);
  int number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    std::string_view line = text.substr(pos, eol == std::string_view::npos ? text.npos : eol - pos);
    pos = eol == std::string_view::npos ? text.size() : eol + 1;
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    auto problem = [&](const std::string& why) {
      std::string shown(line.substr(0, std::min<size_t>(80, line.find('\0'))));
      size_t name_end = 0;
      while (name_end < line.size() && IsValidKey(line.substr(name_end, 1))) ++name_end;
      out.skipped.emplace_back(std::string(line.substr(0, name_end)), shown);
      out.problems.push_back(std::string(path) + " line " + std::to_string(number) + " '" + shown +
                             "': " + why + "; skipped");
    };
    // A value is used as a C string: a NUL would silently cut it short.
    if (line.find('\0') != std::string_view::npos) {
      problem("contains a NUL byte");
      continue;
    }
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      problem("not KEY=VALUE");
      continue;
    }
    std::string_view key = line.substr(0, eq);
    if (!IsValidKey(key)) {
      problem("the key is not a variable name");
      continue;
    }
    out.entries.emplace_back(std::string(key), std::string(line.substr(eq + 1)));
  }
  return out;
}

LimitsFile ReadLimitsFile(const std::string& path) {
  // Outside a container there is usually no file: say so without building an error (every
  // CUDA process reads this at start).
  if (access(path.c_str(), F_OK) != 0 && errno == ENOENT) {
    LimitsFile absent;
    absent.path = path;
    return absent;
  }
  auto text = ReadLocked(path);
  if (!text.ok() || text->empty()) {
    LimitsFile absent;
    absent.path = path;
    if (!text.ok() && text.error().sys_errno() != ENOENT) {
      absent.unreadable = true;
      absent.problems.push_back(text.error().message());
    }
    return absent;
  }
  return ParseLimitsFile(*text, path);
}

Result<std::string> LimitsText(std::span<const Entry> entries) {
  std::vector<const Entry*> sorted;
  sorted.reserve(entries.size());
  for (const Entry& e : entries) {
    const auto& [key, value] = e;
    if (!IsValidKey(key)) return BadEntry(key, "the key is not a variable name ([A-Z0-9_]+)");
    if (key == kFormatKey) return BadEntry(key, "the writer adds the format line itself");
    if (size_t bad = value.find_first_of(std::string_view("\n\r\0", 3)); bad != std::string::npos) {
      const char* what = value[bad] == '\n'   ? "a newline"
                         : value[bad] == '\r' ? "a carriage return"
                                              : "a NUL byte";
      return BadEntry(key, std::string("the value contains ") + what +
                               ", which the reader would not give back");
    }
    sorted.push_back(&e);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const Entry* a, const Entry* b) { return a->first < b->first; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->first == sorted[i - 1]->first) return BadEntry(sorted[i]->first, "given twice");
  }
  const Entry format{kFormatKey, kFormat};
  auto at = std::lower_bound(sorted.begin(), sorted.end(), &format,
                             [](const Entry* a, const Entry* b) { return a->first < b->first; });
  sorted.insert(at, &format);
  std::string text;
  for (const Entry* e : sorted) {
    text += e->first;
    text += '=';
    text += e->second;
    text += '\n';
  }
  if (text.size() > kMaxFileBytes) {
    return Error(ErrorCode::kInvalidArgument,
                 "limits file of " + std::to_string(text.size()) + " bytes: larger than " +
                     std::to_string(kMaxFileBytes) + ", which the reader refuses");
  }
  return text;
}

const char* PublishStepName(PublishStep step) {
  switch (step) {
    case PublishStep::kOpenDirectory:
      return "open directory";
    case PublishStep::kCreateTemp:
      return "create";
    case PublishStep::kWrite:
      return "write";
    case PublishStep::kSync:
      return "fsync";
    case PublishStep::kChmod:
      return "chmod 0644";
    case PublishStep::kRename:
      return "rename";
    case PublishStep::kSyncDirectory:
      return "fsync directory";
  }
  return "?";
}

Status PublishLimitsFile(const std::string& path, std::span<const Entry> entries,
                         const PublishOptions& options) {
  const std::string context = "publishing limits file " + path;
  auto fail = [&](PublishStep step, const std::string& object, int err) {
    return Error(ErrorCode::kIo,
                 context + ": " + PublishStepName(step) + " " + object + ": " + std::strerror(err),
                 err);
  };
  // The injected errno of `step`, else 0.
  auto injected = [&](PublishStep step) { return options.inject ? options.inject(step) : 0; };

  size_t slash = path.rfind('/');
  std::string dir_path = slash == std::string::npos ? "." : path.substr(0, slash);
  if (dir_path.empty()) dir_path = "/";
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty() || base == "." || base == "..") {
    return Error(ErrorCode::kInvalidArgument, context + ": the path names no file");
  }
  auto text = LimitsText(entries);
  if (!text.ok()) return std::move(text).error().Context(context);

  UniqueFd dir(open(dir_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  int err = dir.valid() ? injected(PublishStep::kOpenDirectory) : errno;
  if (err != 0) return fail(PublishStep::kOpenDirectory, dir_path, err);

  std::string temp_name;
  UniqueFd file;
  for (int attempt = 0; attempt < 100 && !file.valid(); ++attempt) {
    temp_name = TempName(base);
    if ((err = injected(PublishStep::kCreateTemp)) == 0) {
      file.Reset(openat(dir.get(), temp_name.c_str(),
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
      err = file.valid() ? 0 : errno;
    }
    if (err != EEXIST) break;  // EEXIST: another writer's name; try another
  }
  const std::string temp_path = (dir_path == "/" ? "" : dir_path) + "/" + temp_name;
  if (!file.valid()) return fail(PublishStep::kCreateTemp, temp_path, err);
  Cleanup remove_temp([&] { unlinkat(dir.get(), temp_name.c_str(), 0); });

  if ((err = injected(PublishStep::kWrite)) == 0) {
    Status written = WriteAll(file.get(), *text);
    err = written.ok() ? 0 : written.error().sys_errno();
  }
  if (err != 0) return fail(PublishStep::kWrite, temp_path, err);
  if (options.sync) {
    if ((err = injected(PublishStep::kSync)) == 0 && fsync(file.get()) != 0) err = errno;
    if (err != 0) return fail(PublishStep::kSync, temp_path, err);
  }
  if ((err = injected(PublishStep::kChmod)) == 0 && fchmod(file.get(), kFileMode) != 0) {
    err = errno;
  }
  if (err != 0) return fail(PublishStep::kChmod, temp_path, err);
  file.Reset();
  if ((err = injected(PublishStep::kRename)) == 0 &&
      renameat(dir.get(), temp_name.c_str(), dir.get(), base.c_str()) != 0) {
    err = errno;
  }
  if (err != 0) return fail(PublishStep::kRename, temp_path + " to " + path, err);
  remove_temp.Cancel();
  if (!options.sync) return OkStatus();
  if ((err = injected(PublishStep::kSyncDirectory)) == 0 && fsync(dir.get()) != 0) err = errno;
  if (err != 0) return fail(PublishStep::kSyncDirectory, dir_path, err);
  return OkStatus();
}

Status UpdateLimitsFileInPlace(const std::string& path, std::span<const Entry> entries) {
  const std::string context = "rewriting limits file " + path + " in place";
  auto text = LimitsText(entries);
  if (!text.ok()) return std::move(text).error().Context(context);
  auto fd = OpenRegularFile(path, O_RDWR);
  if (!fd.ok()) return std::move(fd).error().Context(context + ": open");
  struct stat st {};
  if (fstat(fd->get(), &st) != 0) return Error::FromErrno(context + ": fstat");
  if (st.st_uid != geteuid()) {
    return Error(ErrorCode::kPermission, context + ": owned by uid " + std::to_string(st.st_uid) +
                                             ", not by this process's uid " +
                                             std::to_string(geteuid()) + "; left as it is");
  }
  if (int err = LockWhole(fd->get(), F_WRLCK); err != 0) {
    return Error(
        ErrorCode::kIo,
        context + ": " +
            (err == EAGAIN
                 ? std::string("a reader or another rewrite held the file for 2 s; left as it is")
                 : std::string("lock: ") + std::strerror(err)),
        err);
  }
  const std::string_view t = *text;
  size_t done = 0;
  while (done < t.size()) {
    ssize_t n = pwrite(fd->get(), t.data() + done, t.size() - done, off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Error::FromErrno(context + ": write (the file is damaged; rewrite it)");
    }
    done += size_t(n);
  }
  if (ftruncate(fd->get(), off_t(t.size())) != 0) {
    return Error::FromErrno(context + ": truncate (the file is damaged; rewrite it)");
  }
  if (fsync(fd->get()) != 0) return Error::FromErrno(context + ": fsync");
  return OkStatus();
}

}  // namespace hami::limits
