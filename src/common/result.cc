#include "common/result.h"

namespace hami {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kNotFound:
      return "not found";
    case ErrorCode::kIo:
      return "i/o error";
    case ErrorCode::kCorrupt:
      return "corrupt";
    case ErrorCode::kIncompatible:
      return "incompatible";
    case ErrorCode::kBusy:
      return "busy";
    case ErrorCode::kPermission:
      return "permission";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kInternal:
      return "internal error";
    case ErrorCode::kConflict:
      return "conflict";
    case ErrorCode::kExpired:
      return "expired";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kTimeout:
      return "timeout";
  }
  return "unknown";
}

}  // namespace hami
