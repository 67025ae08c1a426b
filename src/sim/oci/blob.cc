#include "sim/oci/blob.h"

#include <openssl/evp.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>

#include "common/strings.h"

namespace hami::sim::oci {

Result<std::string> Sha256Digest(std::string_view data) {
  uint8_t md[EVP_MAX_MD_SIZE];
  unsigned int md_size = 0;
  if (EVP_Digest(data.data(), data.size(), md, &md_size, EVP_sha256(), nullptr) != 1 ||
      md_size != 32) {
    return Error(ErrorCode::kInternal, "EVP_Digest(sha256) failed");
  }
  return "sha256:" + HexEncode(std::span<const uint8_t>(md, md_size));
}

Result<std::string> Gzip(std::string_view data) {
  z_stream z{};
  // windowBits 15 + 16: a gzip wrapper instead of zlib's; without deflateSetHeader the
  // header carries no name and a zero time.
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return Error(ErrorCode::kInternal, "gzip: deflateInit2 failed");
  }
  std::string out;
  out.resize(deflateBound(&z, uLong(std::min<size_t>(data.size(), 1u << 30))) + 64);
  size_t in_done = 0, out_done = 0;
  constexpr size_t kChunk = size_t{1} << 30;  // within uInt
  int rc = Z_OK;
  do {
    if (z.avail_in == 0 && in_done < data.size()) {
      size_t n = std::min(kChunk, data.size() - in_done);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data() + in_done));
      z.avail_in = uInt(n);
      in_done += n;
    }
    if (out_done == out.size()) out.resize(out.size() * 2);
    z.next_out = reinterpret_cast<Bytef*>(out.data() + out_done);
    z.avail_out = uInt(std::min(kChunk, out.size() - out_done));
    const uInt before = z.avail_out;
    rc = deflate(&z, in_done == data.size() ? Z_FINISH : Z_NO_FLUSH);
    out_done += before - z.avail_out;
  } while (rc == Z_OK || rc == Z_BUF_ERROR);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) {
    return Error(ErrorCode::kInternal, "gzip: deflate failed with " + std::to_string(rc));
  }
  out.resize(out_done);
  return out;
}

}  // namespace hami::sim::oci
