// Fuzzes the DRA driver's checkpoint readers (checkpoint.h), which a plugin runs at every start
// over what an earlier plugin left: any bytes as the snapshot and as the log. Nothing crashes;
// a refusal names the file; what is accepted reads back the same once written again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "dra/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hami::dra;
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  auto snapshot = DecodeCheckpoint(text, "checkpoint /fuzz");
  if (!snapshot.ok()) {
    if (snapshot.error().message().find("checkpoint /fuzz") == std::string::npos) std::abort();
  } else {
    auto again = DecodeCheckpoint(EncodeCheckpoint(*snapshot), "again");
    if (!again.ok() || *again != *snapshot) std::abort();
  }

  Checkpoint replayed;
  if (hami::Status s = ReplayCheckpointLog(text, "checkpoint log /fuzz", replayed); !s.ok()) {
    if (s.error().message().find("checkpoint log /fuzz") == std::string::npos) std::abort();
    return 0;
  }
  // Every claim written back as one line each replays to the same claims.
  std::string log;
  for (const auto& [uid, claim] : replayed) {
    if (uid.empty()) std::abort();
    log += EncodeCheckpointChange(replayed, uid);
  }
  Checkpoint back;
  if (!ReplayCheckpointLog(log, "again", back).ok() || back != replayed) std::abort();
  return 0;
}
