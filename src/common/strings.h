// Small string and integer helpers shared by every component: splitting at a separator, hex
// text for bytes and words, and rounding up to a multiple. Pure functions, thread-safe,
// allocation only where a container is returned; usable in libvgpu (no exceptions).
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hami {

// Splits `s` at every `sep`. The parts view `s` (keep it alive). With `skip_empty` false,
// "a,,b," is {"a", "", "b", ""} and "" is {""}; with it true, empty parts are dropped:
// {"a", "b"} and {}.
std::vector<std::string_view> SplitString(std::string_view s, char sep, bool skip_empty);

// Two lower-case hex digits per byte, in order: {0x0a, 0xff} is "0aff".
std::string HexEncode(std::span<const uint8_t> bytes);

// The bytes an even number of hex digits (either case) spell. An odd length or a character
// that is not a hex digit is kInvalidArgument, naming the character and its offset.
Result<std::vector<uint8_t>> HexDecode(std::string_view text);

// A 64-bit word as "0x" and 16 lower-case hex digits: 0x000000000000abcd.
std::string FormatHex64(uint64_t v);

// The smallest multiple of `to` that is >= `v`. Saturating: when that multiple does not fit
// in 64 bits, returns UINT64_MAX (never a value below `v`), so a size near the top cannot
// wrap to a small charge. Precondition: to > 0.
constexpr uint64_t RoundUp(uint64_t v, uint64_t to) {
  const uint64_t rem = v % to;
  if (rem == 0) return v;
  const uint64_t add = to - rem;
  return v > std::numeric_limits<uint64_t>::max() - add ? std::numeric_limits<uint64_t>::max()
                                                        : v + add;
}

// `v` divided by `by`, rounded up; never overflows. Precondition: by > 0.
constexpr uint64_t CeilDiv(uint64_t v, uint64_t by) { return v / by + (v % by != 0 ? 1 : 0); }

}  // namespace hami
