// NVML's caller's-array protocol, both ways: asking the driver for a whole list, and
// answering a caller's array as the driver does.
#pragma once

#include <algorithm>
#include <vector>

#include "nvml/nvml.h"

namespace hami::vgpu {

// Asks `query(&count, array)` for the whole list into `list`, growing the array while entries
// appear between two calls, a bounded number of times. The driver's error otherwise.
template <typename T, typename Query>
nvmlReturn_t WholeList(std::vector<T>* list, Query query) {
  list->resize(16);
  for (int attempt = 0;; ++attempt) {
    unsigned int n = unsigned(list->size());
    nvmlReturn_t r = query(&n, list->data());
    if (r == NVML_SUCCESS) {
      list->resize(n);
      return r;
    }
    if (r != NVML_ERROR_INSUFFICIENT_SIZE || attempt == 8) return r;
    list->resize(std::max<size_t>(size_t(n) + 16, list->size() * 2));
  }
}

// Gives `out` in the caller's array of `*count` entries, as the driver treats it.
template <typename T>
nvmlReturn_t AnswerList(const std::vector<T>& out, unsigned int* count, T* array) {
  if (*count < out.size() || (array == nullptr && !out.empty())) {
    *count = unsigned(out.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::copy(out.begin(), out.end(), array);
  *count = unsigned(out.size());
  return NVML_SUCCESS;
}

}  // namespace hami::vgpu
