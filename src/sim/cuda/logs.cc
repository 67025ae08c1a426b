// What the driver tells a program on its own initiative: its error log (cuLogs*, CUDA 12.9)
// and asynchronous device notifications (cuDeviceRegisterAsyncNotification, CUDA 12.4).
//
// The simulated driver keeps no error log of its own (what it would say is in its
// HAMI_SIM_LOG_LEVEL output) and its devices raise no notification (a real one raises only
// over-budget notices, on Windows). So callbacks are registered and unregistered as the
// driver checks them but never called, the log is empty: iterators start and stay at 0, a
// dump writes nothing (a file dump creates an empty file; a memory dump an empty string).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <set>

#include "sim/cuda/model.h"

namespace hami::sim {

namespace {

struct Registry {
  std::mutex mu;
  std::set<const void*> logs;
  std::set<std::pair<int, const void*>> notifications;  // (physical device, handle)
};

Registry& Callbacks() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

}  // namespace hami::sim

using namespace hami::sim;  // NOLINT: the exported C API below

// The handles a registration hands out: objects of these types, one per registration.
struct CUlogsCallbackEntry_st {
  CUlogsCallback fn;
  void* data;
};
struct CUasyncCallbackEntry_st {
  CUasyncCallback fn;
  void* data;
  int device;
};

extern "C" {

CUresult CUDAAPI cuLogsRegisterCallback(CUlogsCallback callbackFunc, void* userData,
                                        CUlogsCallbackHandle* callback_out) {
  if (callbackFunc == nullptr || callback_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* e = new CUlogsCallbackEntry_st{callbackFunc, userData};
  std::lock_guard l(Callbacks().mu);
  Callbacks().logs.insert(e);
  *callback_out = e;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLogsUnregisterCallback(CUlogsCallbackHandle callback) {
  std::lock_guard l(Callbacks().mu);
  if (Callbacks().logs.erase(callback) == 0) return CUDA_ERROR_INVALID_VALUE;
  delete callback;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLogsCurrent(CUlogIterator* iterator_out, unsigned int flags) {
  if (iterator_out == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  *iterator_out = 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLogsDumpToFile(CUlogIterator* iterator, const char* pathToFile,
                                  unsigned int flags) {
  if (pathToFile == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  int fd = open(pathToFile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
  close(fd);
  if (iterator != nullptr) *iterator = 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLogsDumpToMemory(CUlogIterator* iterator, char* buffer, size_t* size,
                                    unsigned int flags) {
  if (buffer == nullptr || size == nullptr || *size == 0 || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  buffer[0] = '\0';
  *size = 0;
  if (iterator != nullptr) *iterator = 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceRegisterAsyncNotification(CUdevice device, CUasyncCallback callbackFunc,
                                                   void* userData,
                                                   CUasyncCallbackHandle* callback) {
  if (callbackFunc == nullptr || callback == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int p;
  {
    ApiLock api;
    if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
    if (CUresult r = PhysicalDevice(device, &p); r != CUDA_SUCCESS) return r;
  }
  auto* e = new CUasyncCallbackEntry_st{callbackFunc, userData, p};
  std::lock_guard l(Callbacks().mu);
  Callbacks().notifications.insert({p, e});
  *callback = e;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceUnregisterAsyncNotification(CUdevice device,
                                                     CUasyncCallbackHandle callback) {
  int p;
  {
    ApiLock api;
    if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
    if (CUresult r = PhysicalDevice(device, &p); r != CUDA_SUCCESS) return r;
  }
  std::lock_guard l(Callbacks().mu);
  if (Callbacks().notifications.erase({p, callback}) == 0) return CUDA_ERROR_INVALID_VALUE;
  delete callback;
  return CUDA_SUCCESS;
}

}  // extern "C"
