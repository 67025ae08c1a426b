// Fuzzes the pod record's reader (node/pod_record.h): the file sits in a directory the
// container may write, so any bytes may be there. Whatever the text, the reader refuses it
// or returns a record whose written text reads back as the same record.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "node/pod_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = hami::node::ParsePodRecord(text);
  if (!parsed.ok()) return 0;
  auto again = hami::node::ParsePodRecord(hami::node::PodRecordText(*parsed));
  if (!again.ok() || !(*again == *parsed)) std::abort();
  return 0;
}
