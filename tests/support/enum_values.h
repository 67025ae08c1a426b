// Values of the CUDA and NVML headers' C enums that those headers do not name, for the tests
// that check a simulated library refuses them.
#pragma once

#include <bit>
#include <type_traits>

namespace hami::testing {

// `value` as an `E`, named by the header or not: what a C caller, or a program built against
// a newer header, may pass. C++ leaves the conversion of a constant outside an enumeration's
// range unspecified (-Wconversion says so), so the value's bits are copied into the enum
// instead, as they arrive through the C ABI.
template <typename E>
E UnnamedValue(std::underlying_type_t<E> value) {
  static_assert(std::is_enum_v<E>);
  return std::bit_cast<E>(value);
}

}  // namespace hami::testing
