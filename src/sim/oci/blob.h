// The two encodings an image's blobs need: SHA-256 digests (OpenSSL's EVP) and gzip streams
// (zlib). Pure functions, thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace hami::sim::oci {

// The OCI digest of `data`: "sha256:" and 64 lower-case hex digits.
Result<std::string> Sha256Digest(std::string_view data);

// `data` as one gzip member (RFC 1952), with a zero modification time and no file name, so
// that equal input gives equal bytes.
Result<std::string> Gzip(std::string_view data);

}  // namespace hami::sim::oci
