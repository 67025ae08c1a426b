#include "sim/profiles.h"

#include <cstdio>

#include "common/strings.h"

namespace hami::sim {

namespace {

// NVML architecture codes (nvmlDeviceArchitecture_t).
constexpr int kArchTuring = 6, kArchAmpere = 7, kArchAda = 8, kArchHopper = 9;

// clang-format off
constexpr DeviceProfile kProfiles[] = {
  // key         name                      mem MiB  rsv  ctx  SMs thr/SM blk/SM cc    clk  memclk bus  L2 bytes    smem/SM  smem optin cores arch        pci id       W    gen width  NVSwitch
  {"a100-40g", "NVIDIA A100-SXM4-40GB",   40960,  280, 420, 108, 2048, 32, 8, 0, 1410, 1215, 5120, 40 << 20,  167936, 166912, 64, kArchAmpere, 0x20B010DE, 400, 4, 16, false},
  {"a100-80g", "NVIDIA A100-SXM4-80GB",   81920,  520, 420, 108, 2048, 32, 8, 0, 1410, 1593, 5120, 40 << 20,  167936, 166912, 64, kArchAmpere, 0x20B210DE, 400, 4, 16, false},
  {"h100-80g", "NVIDIA H100 80GB HBM3",   81559,  540, 500, 132, 2048, 32, 9, 0, 1980, 2619, 5120, 50 << 20,  233472, 232448, 128, kArchHopper, 0x233010DE, 700, 5, 16, false},
  // An H100 SXM of an 8-GPU HGX board: the same GPU, on NVLink switches.
  {"h100-hgx", "NVIDIA H100 80GB HBM3",   81559,  540, 500, 132, 2048, 32, 9, 0, 1980, 2619, 5120, 50 << 20,  233472, 232448, 128, kArchHopper, 0x233010DE, 700, 5, 16, true},
  {"h200-141g", "NVIDIA H200",           143771,  560, 500, 132, 2048, 32, 9, 0, 1980, 3201, 6144, 60 << 20,  233472, 232448, 128, kArchHopper, 0x233510DE, 700, 5, 16, false},
  {"l4-24g",   "NVIDIA L4",               23034,  250, 300,  58, 1536, 24, 8, 9, 2040, 6251,  192, 48 << 20,  102400, 101376, 128, kArchAda,    0x27B810DE,  72, 4, 16, false},
  {"a10-24g",  "NVIDIA A10",              23028,  250, 300,  72, 1536, 16, 8, 6, 1695, 6251,  384,  6 << 20,  102400, 101376, 128, kArchAmpere, 0x223610DE, 150, 4, 16, false},
  {"t4-16g",   "Tesla T4",                15360,  220, 280,  40, 1024, 16, 7, 5, 1590, 5001,  256,  4 << 20,   65536,  65536,  64, kArchTuring, 0x1EB810DE,  70, 3, 16, false},
  // A small made-up device for tests that reach physical capacity quickly.
  {"sim-1g",   "HAMi Simulated GPU 1GB",   1024,   16,  32,   8, 2048, 32, 9, 0, 1000, 1000, 1024,  1 << 20,  233472, 232448, 128, kArchHopper, 0x000110DE, 100, 4, 16, false},
};
// clang-format on

uint64_t Mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t Hash(std::string_view s, uint64_t seed) {
  uint64_t h = 0xcbf29ce484222325ull ^ seed;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return Mix(h);
}

void FillIdentity(DeviceSpec* d, std::string_view node, int count) {
  std::string seed = "hami-sim/" + std::string(node) + "/" + std::string(d->profile->key) + "/" +
                     std::to_string(d->index);
  uint64_t a = Hash(seed, 1), b = Hash(seed, 2);
  for (int i = 0; i < 8; ++i) {
    d->uuid_bytes[i] = uint8_t(a >> (8 * i));
    d->uuid_bytes[8 + i] = uint8_t(b >> (8 * i));
  }
  // RFC 4122 version 4 / variant bits, as real GPU UUIDs look random.
  d->uuid_bytes[6] = uint8_t((d->uuid_bytes[6] & 0x0f) | 0x40);
  d->uuid_bytes[8] = uint8_t((d->uuid_bytes[8] & 0x3f) | 0x80);
  d->uuid = GpuUuidString(d->uuid_bytes);
  d->pci_domain = 0;
  d->pci_bus = 0x08 + 0x0f * d->index;
  d->pci_device = 0;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%08X:%02X:%02X.0", unsigned(d->pci_domain), unsigned(d->pci_bus),
                unsigned(d->pci_device));
  d->pci_bus_id = buf;
  d->numa_node = count >= 2 ? d->index * 2 / count : 0;
}

}  // namespace

std::string GpuUuidString(const void* bytes16) {
  const auto* b = static_cast<const uint8_t*>(bytes16);
  std::string out = "GPU-";
  constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[b[i] >> 4];
    out += kHex[b[i] & 0xf];
  }
  return out;
}

std::span<const DeviceProfile> Profiles() { return kProfiles; }

const DeviceProfile* FindProfile(std::string_view key) {
  for (const DeviceProfile& p : kProfiles) {
    if (p.key == key) return &p;
  }
  return nullptr;
}

std::string ProfileKeys() {
  std::string out;
  for (const DeviceProfile& p : kProfiles) {
    if (!out.empty()) out += ", ";
    out += p.key;
  }
  return out;
}

Result<std::vector<DeviceSpec>> ParseProfileSpec(std::string_view spec, std::string_view node,
                                                 std::string_view what) {
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::kInvalidArgument,
                 std::string(what) + "='" + std::string(spec) + "': " + why);
  };
  std::vector<DeviceSpec> out;
  if (spec == "none") return out;
  if (spec.empty()) return bad("empty device list (use e.g. h100-80g:2, or none)");
  for (std::string_view entry : SplitString(spec, ',', false)) {
    if (entry.empty()) return bad("empty entry in the device list");
    std::string_view key = entry;
    int count = 1;
    if (size_t colon = entry.find(':'); colon != std::string_view::npos) {
      key = entry.substr(0, colon);
      std::string_view n = entry.substr(colon + 1);
      if (n.empty() || n.size() > 2 || n.find_first_not_of("0123456789") != n.npos) {
        return bad("count '" + std::string(n) + "' of '" + std::string(key) +
                   "' is not a number from 1 to 16");
      }
      count = std::stoi(std::string(n));
      if (count < 1 || count > kMaxDevices) {
        return bad("count " + std::to_string(count) + " of '" + std::string(key) +
                   "' is not from 1 to 16");
      }
    }
    const DeviceProfile* p = FindProfile(key);
    if (p == nullptr) {
      return bad("unknown profile '" + std::string(key) + "' (known: " + ProfileKeys() + ")");
    }
    for (int i = 0; i < count; ++i) {
      if (out.size() == size_t(kMaxDevices)) {
        return bad("more than " + std::to_string(kMaxDevices) + " devices");
      }
      DeviceSpec d{};
      d.profile = p;
      d.index = int(out.size());
      out.push_back(d);
    }
  }
  for (DeviceSpec& d : out) FillIdentity(&d, node, int(out.size()));
  return out;
}

}  // namespace hami::sim
