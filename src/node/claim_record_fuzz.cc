// Fuzzes the claim record's reader (node/claim_record.h): whatever the text, the reader refuses
// it or returns a record whose written text reads back as the same record.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "node/claim_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = hami::node::ParseClaimRecord(text);
  if (!parsed.ok()) return 0;
  auto again = hami::node::ParseClaimRecord(hami::node::ClaimRecordText(*parsed));
  if (!again.ok() || !(*again == *parsed)) std::abort();
  return 0;
}
