// The interposer's two boundaries: an Error of ours that must reach the application becomes
// a CUresult or an nvmlReturn_t here, and only here (docs/design.md, "Failure policy").
//
// These map kinds of failure, not decisions: a refusal of an accounted allocation is
// CUDA_ERROR_OUT_OF_MEMORY because the policy says so (a limit that cannot be read is a
// refusal), whatever Error explained it. Pure, constexpr, async-signal-safe; log the Error's
// text() before converting, since the code alone loses it.
#pragma once

#include <cuda.h>

#include "common/result.h"
#include "nvml/nvml.h"

namespace hami::vgpu {

constexpr CUresult ToCuResult(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return CUDA_ERROR_INVALID_VALUE;
    case ErrorCode::kNotFound:
      return CUDA_ERROR_NOT_FOUND;
    case ErrorCode::kUnsupported:
    case ErrorCode::kIncompatible:
      return CUDA_ERROR_NOT_SUPPORTED;
    case ErrorCode::kBusy:
      return CUDA_ERROR_OUT_OF_MEMORY;  // the budget is held by others
    case ErrorCode::kPermission:
      return CUDA_ERROR_NOT_PERMITTED;
    case ErrorCode::kTimeout:
      return CUDA_ERROR_TIMEOUT;
    case ErrorCode::kInternal:
      return CUDA_ERROR_UNKNOWN;
    case ErrorCode::kIo:
    case ErrorCode::kCorrupt:
    case ErrorCode::kConflict:
    case ErrorCode::kExpired:
    case ErrorCode::kUnavailable:
      return CUDA_ERROR_OPERATING_SYSTEM;
  }
  return CUDA_ERROR_UNKNOWN;
}
inline CUresult ToCuResult(const Error& error) { return ToCuResult(error.code()); }

constexpr nvmlReturn_t ToNvmlReturn(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return NVML_ERROR_INVALID_ARGUMENT;
    case ErrorCode::kNotFound:
      return NVML_ERROR_NOT_FOUND;
    case ErrorCode::kUnsupported:
      return NVML_ERROR_NOT_SUPPORTED;
    case ErrorCode::kIncompatible:
      return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    case ErrorCode::kBusy:
      return NVML_ERROR_IN_USE;
    case ErrorCode::kPermission:
      return NVML_ERROR_NO_PERMISSION;
    case ErrorCode::kTimeout:
      return NVML_ERROR_TIMEOUT;
    case ErrorCode::kIo:
    case ErrorCode::kUnavailable:
      return NVML_ERROR_OPERATING_SYSTEM;
    case ErrorCode::kCorrupt:
    case ErrorCode::kInternal:
    case ErrorCode::kConflict:
    case ErrorCode::kExpired:
      return NVML_ERROR_UNKNOWN;
  }
  return NVML_ERROR_UNKNOWN;
}
inline nvmlReturn_t ToNvmlReturn(const Error& error) { return ToNvmlReturn(error.code()); }

}  // namespace hami::vgpu
