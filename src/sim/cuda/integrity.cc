#include "sim/cuda/integrity.h"

#include <cstring>

namespace hami::sim {

namespace {

// RFC 1319's substitution table (a permutation of 0..255 derived from the digits of pi).
constexpr uint8_t kPiSubst[256] = {
    0x29, 0x2e, 0x43, 0xc9, 0xa2, 0xd8, 0x7c, 0x01, 0x3d, 0x36, 0x54, 0xa1, 0xec, 0xf0, 0x06, 0x13,
    0x62, 0xa7, 0x05, 0xf3, 0xc0, 0xc7, 0x73, 0x8c, 0x98, 0x93, 0x2b, 0xd9, 0xbc, 0x4c, 0x82, 0xca,
    0x1e, 0x9b, 0x57, 0x3c, 0xfd, 0xd4, 0xe0, 0x16, 0x67, 0x42, 0x6f, 0x18, 0x8a, 0x17, 0xe5, 0x12,
    0xbe, 0x4e, 0xc4, 0xd6, 0xda, 0x9e, 0xde, 0x49, 0xa0, 0xfb, 0xf5, 0x8e, 0xbb, 0x2f, 0xee, 0x7a,
    0xa9, 0x68, 0x79, 0x91, 0x15, 0xb2, 0x07, 0x3f, 0x94, 0xc2, 0x10, 0x89, 0x0b, 0x22, 0x5f, 0x21,
    0x80, 0x7f, 0x5d, 0x9a, 0x5a, 0x90, 0x32, 0x27, 0x35, 0x3e, 0xcc, 0xe7, 0xbf, 0xf7, 0x97, 0x03,
    0xff, 0x19, 0x30, 0xb3, 0x48, 0xa5, 0xb5, 0xd1, 0xd7, 0x5e, 0x92, 0x2a, 0xac, 0x56, 0xaa, 0xc6,
    0x4f, 0xb8, 0x38, 0xd2, 0x96, 0xa4, 0x7d, 0xb6, 0x76, 0xfc, 0x6b, 0xe2, 0x9c, 0x74, 0x04, 0xf1,
    0x45, 0x9d, 0x70, 0x59, 0x64, 0x71, 0x87, 0x20, 0x86, 0x5b, 0xcf, 0x65, 0xe6, 0x2d, 0xa8, 0x02,
    0x1b, 0x60, 0x25, 0xad, 0xae, 0xb0, 0xb9, 0xf6, 0x1c, 0x46, 0x61, 0x69, 0x34, 0x40, 0x7e, 0x0f,
    0x55, 0x47, 0xa3, 0x23, 0xdd, 0x51, 0xaf, 0x3a, 0xc3, 0x5c, 0xf9, 0xce, 0xba, 0xc5, 0xea, 0x26,
    0x2c, 0x53, 0x0d, 0x6e, 0x85, 0x28, 0x84, 0x09, 0xd3, 0xdf, 0xcd, 0xf4, 0x41, 0x81, 0x4d, 0x52,
    0x6a, 0xdc, 0x37, 0xc8, 0x6c, 0xc1, 0xab, 0xfa, 0x24, 0xe1, 0x7b, 0x08, 0x0c, 0xbd, 0xb1, 0x4a,
    0x78, 0x88, 0x95, 0x8b, 0xe3, 0x63, 0xe8, 0x6d, 0xe9, 0xcb, 0xd5, 0xfe, 0x3b, 0x00, 0x1d, 0x39,
    0xf2, 0xef, 0xb7, 0x0e, 0x66, 0x58, 0xd0, 0xe4, 0xa6, 0x77, 0x72, 0xf8, 0xeb, 0x75, 0x4b, 0x0a,
    0x31, 0x44, 0x50, 0xb4, 0x8f, 0xed, 0x1f, 0x1a, 0xdb, 0x99, 0x8d, 0x33, 0x9f, 0x11, 0x83, 0x14,
};

constexpr size_t kBlock = 16;

// The integrity check's key (one MD2 block).
constexpr uint8_t kKey[kBlock] = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                  0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};

// The constant answers for version % 10 == 0 and == 1.
constexpr uint64_t kAnswer0[2] = {0x3341181C03CB675Cull, 0x8ED383AA1F4CD1E8ull};
constexpr uint64_t kAnswer1[2] = {0x1841181C03CB675Cull, 0x8ED383AA1F4CD1E8ull};

class Md2State {
 public:
  void Update(std::span<const uint8_t> data) {
    for (uint8_t b : data) {
      block_[fill_++] = b;
      if (fill_ == kBlock) {
        Compress(block_);
        fill_ = 0;
      }
    }
  }

  Md2Digest Finish() {
    const auto pad = uint8_t(kBlock - fill_);
    uint8_t padding[kBlock];
    std::memset(padding, pad, pad);
    Update(std::span<const uint8_t>(padding, pad));
    uint8_t checksum[kBlock];
    std::memcpy(checksum, checksum_, kBlock);
    Compress(checksum);
    Md2Digest out;
    std::memcpy(out.data(), x_, kBlock);
    return out;
  }

 private:
  // Mixes one block into the state and into the running checksum.
  void Compress(const uint8_t* block) {
    for (size_t j = 0; j < kBlock; ++j) {
      x_[kBlock + j] = block[j];
      x_[2 * kBlock + j] = uint8_t(block[j] ^ x_[j]);
    }
    uint8_t t = 0;
    for (unsigned round = 0; round < 18; ++round) {
      for (uint8_t& v : x_) t = v ^= kPiSubst[t];
      t = uint8_t(t + round);
    }
    for (size_t j = 0; j < kBlock; ++j) last_ = checksum_[j] ^= kPiSubst[block[j] ^ last_];
  }

  uint8_t x_[3 * kBlock] = {};
  uint8_t checksum_[kBlock] = {};
  uint8_t last_ = 0;
  uint8_t block_[kBlock] = {};
  size_t fill_ = 0;
};

void Append(std::vector<uint8_t>* out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out->insert(out->end(), b, b + n);
}

template <typename T>
void AppendLe(std::vector<uint8_t>* out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out->push_back(uint8_t(uint64_t(v) >> (8 * i)));
}

}  // namespace

Md2Digest Md2(std::span<const uint8_t> data) {
  Md2State s;
  s.Update(data);
  return s.Finish();
}

Md2Digest HmacMd2(std::span<const uint8_t> key, std::span<const uint8_t> message) {
  uint8_t k[kBlock] = {};
  if (key.size() > kBlock) {
    Md2Digest d = Md2(key);
    std::memcpy(k, d.data(), kBlock);
  } else {
    std::memcpy(k, key.data(), key.size());
  }
  uint8_t pad[kBlock];
  for (size_t i = 0; i < kBlock; ++i) pad[i] = uint8_t(k[i] ^ 0x36);
  Md2State inner;
  inner.Update(pad);
  inner.Update(message);
  Md2Digest inner_digest = inner.Finish();
  for (size_t i = 0; i < kBlock; ++i) pad[i] = uint8_t(k[i] ^ 0x5c);
  Md2State outer;
  outer.Update(pad);
  outer.Update(inner_digest);
  return outer.Finish();
}

std::vector<uint8_t> IntegrityMessage(const IntegrityCaller& caller, uint32_t version,
                                      uint64_t unix_seconds,
                                      std::span<const IntegrityDevice> devices) {
  std::vector<uint8_t> m;
  m.reserve(48 + 28 * devices.size());
  AppendLe(&m, caller.driver_version);
  AppendLe(&m, version);
  AppendLe(&m, caller.pid);
  AppendLe(&m, caller.thread_low32);
  AppendLe(&m, caller.runtime_table);
  AppendLe(&m, caller.integrity_table);
  AppendLe(&m, caller.check_function);
  AppendLe(&m, unix_seconds);
  for (const IntegrityDevice& d : devices) {
    Append(&m, d.uuid, sizeof(d.uuid));
    AppendLe(&m, uint32_t(d.pci_domain));
    AppendLe(&m, uint32_t(d.pci_bus));
    AppendLe(&m, uint32_t(d.pci_device));
  }
  return m;
}

bool IntegrityAnswer(const IntegrityCaller& caller, uint32_t version, uint64_t unix_seconds,
                     std::span<const IntegrityDevice> devices, uint64_t out[2]) {
  switch (version % 10) {
    case 0:
      out[0] = kAnswer0[0];
      out[1] = kAnswer0[1];
      return true;
    case 1:
      out[0] = kAnswer1[0];
      out[1] = kAnswer1[1];
      return true;
    case 2: {
      std::vector<uint8_t> m = IntegrityMessage(caller, version, unix_seconds, devices);
      Md2Digest d = HmacMd2(kKey, m);
      std::memcpy(out, d.data(), d.size());
      return true;
    }
    default:
      return false;
  }
}

}  // namespace hami::sim
