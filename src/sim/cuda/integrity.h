// The answer of the driver's integrity-check export table, which the CUDA runtime verifies
// before it runs any call (docs/simulated-gpu.md, "Export tables").
//
// The runtime asks slot 1 of the table for three values in a row, with `version` =
// 1000 * major + 10 * minor + k (k = 0, 1, 2) and one time stamp. For k = 0 and k = 1 the
// answer is a constant pair; for k = 2 it is an HMAC-MD2 (RFC 2104 over RFC 1319) of a
// record describing the caller and the devices, which the runtime recomputes from what the
// public API reports: every input must agree with it.
//
// Pure functions; thread-safe; no allocation beyond the message buffer.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace hami::sim {

using Md2Digest = std::array<uint8_t, 16>;

// RFC 1319 MD2 of `data`.
Md2Digest Md2(std::span<const uint8_t> data);

// RFC 2104 HMAC over MD2 (16-byte blocks). A key longer than one block is hashed first.
Md2Digest HmacMd2(std::span<const uint8_t> key, std::span<const uint8_t> message);

// What the caller of the integrity check is and sees.
struct IntegrityCaller {
  uint32_t driver_version = 0;   // what cuDriverGetVersion reports
  uint32_t pid = 0;              // getpid() of the caller
  uint32_t thread_low32 = 0;     // the low 32 bits of the caller's pthread_self()
  uint64_t runtime_table = 0;    // address of the CUDA-runtime interface table served
  uint64_t integrity_table = 0;  // address of the integrity-check table served
  uint64_t check_function = 0;   // the function in slot 1 of that table
};

// One device as cuDeviceGetUuid and the PCI attributes report it, in CUdevice order.
struct IntegrityDevice {
  uint8_t uuid[16] = {};
  int32_t pci_domain = 0;
  int32_t pci_bus = 0;
  int32_t pci_device = 0;
};

// The message of the k = 2 answer: a 48-byte record of the caller, `version` and
// `unix_seconds` (little-endian, unpadded), then 28 bytes per device.
std::vector<uint8_t> IntegrityMessage(const IntegrityCaller& caller, uint32_t version,
                                      uint64_t unix_seconds,
                                      std::span<const IntegrityDevice> devices);

// The two 64-bit words slot 1 writes for `version`. False when version % 10 > 2 (a request
// this model does not know).
bool IntegrityAnswer(const IntegrityCaller& caller, uint32_t version, uint64_t unix_seconds,
                     std::span<const IntegrityDevice> devices, uint64_t out[2]);

}  // namespace hami::sim
