// PointerMap: device address -> value, an open-addressing hash table with no allocation per
// entry, for the allocations a process holds (looked up on every free).
//
// Keys are device addresses: 0 and 1 are never valid allocations and mark empty and erased
// slots. Not thread-safe: the caller locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace hami::vgpu {

template <typename V>
class PointerMap {
 public:
  size_t size() const { return live_; }

  V* Find(uint64_t key) {
    if (key <= kErased || slots_.empty()) return nullptr;
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == key) return &s.value;
      if (s.key == kEmpty) return nullptr;
    }
  }

  // Adds or replaces. Keys 0 and 1 are ignored.
  void Insert(uint64_t key, const V& value) {
    if (key <= kErased) return;
    if (V* v = Find(key)) {
      *v = value;
      return;
    }
    if ((used_ + 1) * 4 > slots_.size() * 3) Rehash();
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key <= kErased) {
        used_ += s.key == kEmpty;
        s = Slot{key, value};
        ++live_;
        return;
      }
    }
  }

  // Removes `key`, giving its value; false if absent.
  bool Erase(uint64_t key, V* out) {
    V* v = Find(key);
    if (v == nullptr) return false;
    if (out != nullptr) *out = std::move(*v);
    Slot* s = reinterpret_cast<Slot*>(reinterpret_cast<char*>(v) - offsetof(Slot, value));
    s->key = kErased;
    --live_;
    return true;
  }

  // Calls fn(key, value) for each entry; erases those for which it returns true.
  template <typename Fn>
  void EraseIf(Fn fn) {
    for (Slot& s : slots_) {
      if (s.key > kErased && fn(s.key, s.value)) {
        s.key = kErased;
        --live_;
      }
    }
  }

  void Clear() {
    slots_.clear();
    mask_ = 0;
    used_ = live_ = 0;
  }

 private:
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kErased = 1;
  struct Slot {
    uint64_t key = kEmpty;
    V value{};
  };

  size_t Home(uint64_t key) const {
    // Allocations are aligned: the low bits carry nothing.
    return size_t(((key >> 9) * 0x9E3779B97F4A7C15ull) >> 20) & mask_;
  }

  // Grows (or, when erased slots fill it, rebuilds) to a quarter full.
  void Rehash() {
    size_t n = 16;
    while (n < (live_ + 1) * 4) n *= 2;
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(n, Slot{});
    mask_ = n - 1;
    used_ = live_ = 0;
    for (Slot& s : old) {
      if (s.key > kErased) Insert(s.key, s.value);
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t used_ = 0;  // slots not empty (live or erased)
  size_t live_ = 0;
};

}  // namespace hami::vgpu
