#include "vgpu/status.h"

#include <gtest/gtest.h>

#include <set>

namespace hami::vgpu {
namespace {

constexpr ErrorCode kEveryCode[] = {
    ErrorCode::kInvalidArgument, ErrorCode::kNotFound,     ErrorCode::kIo,
    ErrorCode::kCorrupt,         ErrorCode::kIncompatible, ErrorCode::kBusy,
    ErrorCode::kPermission,      ErrorCode::kUnsupported,  ErrorCode::kInternal,
    ErrorCode::kConflict,        ErrorCode::kExpired,      ErrorCode::kUnavailable,
    ErrorCode::kTimeout,
};

TEST(Status, EveryErrorCodeBecomesAFailureAtBothBoundaries) {
  for (ErrorCode c : kEveryCode) {
    EXPECT_NE(ToCuResult(c), CUDA_SUCCESS) << int(c);
    EXPECT_NE(ToNvmlReturn(c), NVML_SUCCESS) << int(c);
  }
}

TEST(Status, InputErrorsKeepTheirMeaning) {
  Error bad(ErrorCode::kInvalidArgument, "device ordinal out of range");
  EXPECT_EQ(ToCuResult(bad), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(ToNvmlReturn(bad), NVML_ERROR_INVALID_ARGUMENT);
  Error missing(ErrorCode::kNotFound, "no such device");
  EXPECT_EQ(ToCuResult(missing), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(ToNvmlReturn(missing), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(ToCuResult(ErrorCode::kPermission), CUDA_ERROR_NOT_PERMITTED);
  EXPECT_EQ(ToNvmlReturn(ErrorCode::kPermission), NVML_ERROR_NO_PERMISSION);
  EXPECT_EQ(ToCuResult(ErrorCode::kTimeout), CUDA_ERROR_TIMEOUT);
  EXPECT_EQ(ToNvmlReturn(ErrorCode::kTimeout), NVML_ERROR_TIMEOUT);
}

TEST(Status, SystemFailuresAreOperatingSystemErrors) {
  Error io = Error::FromErrno("open /tmp/vgpulock/lock", EACCES);
  EXPECT_EQ(ToCuResult(io), CUDA_ERROR_OPERATING_SYSTEM);
  EXPECT_EQ(ToNvmlReturn(io), NVML_ERROR_OPERATING_SYSTEM);
}

// The conversions are usable where a code must be known at compile time (hook tables).
static_assert(ToCuResult(ErrorCode::kBusy) == CUDA_ERROR_OUT_OF_MEMORY);
static_assert(ToNvmlReturn(ErrorCode::kBusy) == NVML_ERROR_IN_USE);

}  // namespace
}  // namespace hami::vgpu
