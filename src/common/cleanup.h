// Cleanup: runs a callable when it leaves scope, unless Cancel() was called.
#pragma once

#include <utility>

namespace hami {

template <typename F>
class [[nodiscard]] Cleanup {
 public:
  explicit Cleanup(F f) : f_(std::move(f)) {}
  Cleanup(const Cleanup&) = delete;
  Cleanup& operator=(const Cleanup&) = delete;
  ~Cleanup() {
    if (armed_) f_();
  }
  void Cancel() { armed_ = false; }

 private:
  F f_;
  bool armed_ = true;
};

}  // namespace hami
