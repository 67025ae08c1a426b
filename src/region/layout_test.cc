// The shared region's field table against its checked-in golden copy (layout_golden.txt):
// any change to an offset, a size, a count or the fingerprint shows up in review as a diff
// of that file, and fails here until the file is regenerated.
#include "region/layout.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/file.h"
#include "common/unique_fd.h"

namespace hami::region::layout {
namespace {

std::string FieldTable() {
  std::string out = "# shared region layout " + std::to_string(kMajor) + "." +
                    std::to_string(kMinor) + ": field, offset, size (bytes)\n";
  char line[160];
  for (const Field& f : kFields) {
    std::snprintf(line, sizeof(line), "%-34s %8" PRIu64 " %6" PRIu64 "\n", f.name, f.offset,
                  f.size);
    out += line;
  }
  out += "# given to reserved bytes by minor versions (outside the fingerprint)\n";
  for (const Field& f : kMinorFields) {
    std::snprintf(line, sizeof(line), "%-34s %8" PRIu64 " %6" PRIu64 "\n", f.name, f.offset,
                  f.size);
    out += line;
  }
  std::snprintf(line, sizeof(line),
                "sizeof(File) %zu\nmax_devices %d max_slots %d usage_kinds %d\n"
                "fingerprint 0x%016" PRIx64 "\n",
                sizeof(File), kMaxDevices, kMaxSlots, kUsageKinds, Fingerprint());
  out += line;
  return out;
}

TEST(Layout, FieldTableMatchesTheGoldenFile) {
  const std::string table = FieldTable();
  if (const char* update = std::getenv("HAMI_UPDATE_GOLDEN"); update && *update == '1') {
    auto fd = OpenRegularFile(HAMI_LAYOUT_GOLDEN, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ASSERT_TRUE(fd.ok()) << fd.error().message();
    ASSERT_TRUE(WriteAll(fd->get(), table).ok());
  }
  auto golden = ReadFileToString(HAMI_LAYOUT_GOLDEN);
  ASSERT_TRUE(golden.ok()) << golden.error().message();
  EXPECT_EQ(table, *golden)
      << "The shared region's layout (src/region/layout.h) no longer matches " << HAMI_LAYOUT_GOLDEN
      << ". The new field table:\n\n"
      << table
      << "\nIf the change is intended, bump the layout version (layout::kMajor: readers of "
         "another major refuse the file; a minor may only give meaning to reserved bytes) and "
         "regenerate the golden file: HAMI_UPDATE_GOLDEN=1 layout_test";
}

TEST(Layout, FieldsAreInOrderInsideTheFileAndDoNotOverlap) {
  std::vector<Field> all(std::begin(kFields), std::end(kFields));
  all.insert(all.end(), std::begin(kMinorFields), std::end(kMinorFields));
  std::sort(all.begin(), all.end(),
            [](const Field& a, const Field& b) { return a.offset < b.offset; });
  uint64_t end = 0;
  const char* prev = "start";
  for (const Field& f : all) {
    EXPECT_GE(f.offset, end) << f.name << " overlaps " << prev;
    EXPECT_LE(f.offset + f.size, sizeof(File)) << f.name;
    end = f.offset + f.size;
    prev = f.name;
  }
}

}  // namespace
}  // namespace hami::region::layout
