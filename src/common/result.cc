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
  }
  return "unknown";
}

}  // namespace hami
