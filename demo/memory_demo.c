/* hami-memory-demo: what a process sees and may allocate under `hami run --memory`. A plain
 * driver API and NVML program, compiled only against cuda.h and the project's NVML
 * declarations; it runs on whichever libcuda.so.1 and libnvidia-ml.so.1 the loader finds.
 * Each mode prints a short account with the figures and checks what the limit promises.
 *
 *   hami-memory-demo limit LIMIT       the memory limit the environment gives each device
 *                                      (its own CUDA_DEVICE_MEMORY_LIMIT_<i>, else
 *                                      CUDA_DEVICE_MEMORY_LIMIT); device 0 shows LIMIT through
 *                                      cuMemGetInfo and NVML; an allocation within the budget
 *                                      passes, one of the whole budget is refused
 *                                      (CUDA_ERROR_OUT_OF_MEMORY)
 *   hami-memory-demo share LIMIT HOLD  starts a second process that holds HOLD bytes, then
 *                                      shows that this one sees HOLD less and is refused
 *                                      what only the other's memory stands in the way of,
 *                                      until the other exits
 *   hami-memory-demo view              prints device 0's figures, checks nothing
 *   hami-memory-demo hold BYTES        (used by share) holds BYTES until stdin closes
 *   hami-memory-demo probe BYTES       a long-running process: for each line on stdin, tries
 *                                      to allocate BYTES on device 0 and frees it, printing
 *                                      the total cuMemGetInfo shows and the outcome; shows a
 *                                      running process following a resize of its container
 *
 * Sizes take k, m, g, t suffixes (binary). Exit status: 0 when every check held, 1 when one
 * failed, 2 for a usage error or a CUDA call that failed where it should not. */
#include <cuda.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nvml/nvml.h"

#define MIB(bytes) ((unsigned long long)((bytes) >> 20))

/* The variables libvgpu.so reads, named by the project's one list of them
 * (src/limits/vocabulary.def): kKeyNames[kKey<Id>]. A per-device name ends in "_<i>". */
enum VocabularyKey {
#define HAMI_LIMIT_KEY(id, name, codec, scope, unit) kKey##id,
#include "limits/vocabulary.def"
#undef HAMI_LIMIT_KEY
};
static const char* const kKeyNames[] = {
#define HAMI_LIMIT_KEY(id, name, codec, scope, unit) name,
#include "limits/vocabulary.def"
#undef HAMI_LIMIT_KEY
};

static int g_failed = 0;

static const char* ErrName(CUresult r) {
  const char* name = NULL;
  return cuGetErrorName(r, &name) == CUDA_SUCCESS && name != NULL ? name : "?";
}

#define CHECK(call)                                                             \
  do {                                                                          \
    CUresult r_ = (call);                                                       \
    if (r_ != CUDA_SUCCESS) {                                                   \
      fprintf(stderr, "hami-memory-demo: %s failed: %s\n", #call, ErrName(r_)); \
      exit(2);                                                                  \
    }                                                                           \
  } while (0)

static void Expect(int ok, const char* what) {
  printf("%s %s\n", ok ? "ok:    " : "FAILED:", what);
  if (!ok) g_failed = 1;
}

static size_t ParseBytes(const char* text) {
  char* end = NULL;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || end == text || text[0] == '-') goto bad;
  switch (*end) {
    case '\0':
      return (size_t)v;
    case 'k':
    case 'K':
      v <<= 10;
      break;
    case 'm':
    case 'M':
      v <<= 20;
      break;
    case 'g':
    case 'G':
      v <<= 30;
      break;
    case 't':
    case 'T':
      v <<= 40;
      break;
    default:
      goto bad;
  }
  if (end[1] == '\0') return (size_t)v;
bad:
  fprintf(stderr, "hami-memory-demo: '%s' is not a size (a number with k, m, g or t)\n", text);
  exit(2);
}

static CUdevice StartContext(void) {
  CUdevice dev;
  CUcontext ctx;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  return dev;
}

/* Device 0's memory as NVML reports it (found by its CUDA UUID); 0 when NVML is absent. */
static int NvmlMemory(CUdevice dev, nvmlMemory_t* memory) {
  CUuuid u;
  char uuid[64];
  nvmlDevice_t handle;
  CHECK(cuDeviceGetUuid(&u, dev));
  const unsigned char* b = (const unsigned char*)u.bytes;
  snprintf(uuid, sizeof(uuid),
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
           b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
           b[15]);
  nvmlReturn_t r = nvmlInit_v2();
  if (r == NVML_SUCCESS) r = nvmlDeviceGetHandleByUUID(uuid, &handle);
  if (r == NVML_SUCCESS) r = nvmlDeviceGetMemoryInfo(handle, memory);
  if (r != NVML_SUCCESS) {
    printf("NVML:         not available (%s)\n", nvmlErrorString(r));
    return 0;
  }
  return 1;
}

/* The memory limit the environment gives each device this process sees: a device's own
 * CUDA_DEVICE_MEMORY_LIMIT_<i> (i: its CUDA ordinal here), else CUDA_DEVICE_MEMORY_LIMIT. The
 * limits file beats both; only libvgpu.so reads it, and cuMemGetInfo shows the outcome. */
static void PrintEnvironmentLimits(void) {
  const char* all_name = kKeyNames[kKeyMemoryLimit];
  const char* all = getenv(all_name);
  const char* per_device = kKeyNames[kKeyDeviceMemoryLimit];
  const int prefix = (int)(strlen(per_device) - strlen("<i>"));
  int count = 0;
  CHECK(cuDeviceGetCount(&count));
  for (int d = 0; d < count; ++d) {
    char own_name[64];
    snprintf(own_name, sizeof(own_name), "%.*s%d", prefix, per_device, d);
    const char* own = getenv(own_name);
    if (own != NULL) {
      printf("environment:  device %d: %s=%s (its own limit)\n", d, own_name, own);
    } else if (all != NULL) {
      printf("environment:  device %d: %s=%s (the limit of every device without its own)\n", d,
             all_name, all);
    } else {
      printf("environment:  device %d: neither %s nor %s (only the limits file can say)\n", d,
             own_name, all_name);
    }
  }
}

static int Limit(size_t limit) {
  CUdevice dev = StartContext();
  PrintEnvironmentLimits();
  size_t free_bytes = 0, total = 0;
  CHECK(cuMemGetInfo(&free_bytes, &total));
  printf("cuMemGetInfo: total %llu MiB, free %llu MiB (its CUDA context uses %llu MiB)\n",
         MIB(total), MIB(free_bytes), MIB(total - free_bytes));
  Expect(total == limit, "cuMemGetInfo shows the limit as the device's total");
  nvmlMemory_t nvml;
  if (NvmlMemory(dev, &nvml)) {
    printf("NVML:         total %llu MiB, used %llu MiB, free %llu MiB\n", MIB(nvml.total),
           MIB(nvml.used), MIB(nvml.free));
    Expect(nvml.total == limit, "NVML shows the limit as the device's total");
  }

  size_t half = (free_bytes / 2) & ~(((size_t)1 << 20) - 1);
  CUdeviceptr within = 0, whole = 0;
  CUresult r = cuMemAlloc(&within, half);
  printf("cuMemAlloc(%llu MiB), within the budget: %s\n", MIB(half), ErrName(r));
  Expect(r == CUDA_SUCCESS, "an allocation within the budget succeeds");
  r = cuMemAlloc(&whole, limit);
  printf("cuMemAlloc(%llu MiB), the whole budget again: %s\n", MIB(limit), ErrName(r));
  Expect(r == CUDA_ERROR_OUT_OF_MEMORY, "an allocation past the limit is refused");
  if (r == CUDA_SUCCESS) cuMemFree(whole);
  if (within != 0) cuMemFree(within);
  return g_failed;
}

static int Hold(size_t bytes) {
  StartContext();
  CUdeviceptr p;
  CHECK(cuMemAlloc(&p, bytes));
  printf("holding %llu\n", (unsigned long long)bytes);
  fflush(stdout);
  char buf[64];
  while (read(0, buf, sizeof(buf)) > 0) {
  }
  CHECK(cuMemFree(p));
  return 0;
}

static int Probe(size_t bytes) {
  StartContext();
  printf("probe: ready, %llu MiB on each line\n", MIB(bytes));
  char line[256];
  for (unsigned long n = 1; fgets(line, sizeof(line), stdin) != NULL; ++n) {
    size_t free_bytes = 0, total = 0;
    CHECK(cuMemGetInfo(&free_bytes, &total));
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc(&p, bytes);
    printf("probe %lu: total %llu MiB, cuMemAlloc(%llu MiB): %s\n", n, MIB(total), MIB(bytes),
           ErrName(r));
    if (r == CUDA_SUCCESS) CHECK(cuMemFree(p));
  }
  return 0;
}

static int Share(size_t limit, size_t hold) {
  /* The other process first, before this one touches CUDA. */
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) return 2;
  char hold_text[32];
  snprintf(hold_text, sizeof(hold_text), "%zu", hold);
  pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    close(to_child[0]);
    close(to_child[1]);
    close(from_child[0]);
    close(from_child[1]);
    execl("/proc/self/exe", "hami-memory-demo", "hold", hold_text, (char*)NULL);
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  FILE* from = fdopen(from_child[0], "r");
  char line[128] = "";
  if (from == NULL || fgets(line, sizeof(line), from) == NULL || strncmp(line, "holding", 7) != 0) {
    fprintf(stderr, "hami-memory-demo: the holding process did not start\n");
    return 2;
  }
  printf("process A (pid %d) holds %llu MiB plus its CUDA context\n", (int)pid, MIB(hold));

  StartContext();
  size_t free_bytes = 0, total = 0;
  CHECK(cuMemGetInfo(&free_bytes, &total));
  printf("process B sees: total %llu MiB, free %llu MiB\n", MIB(total), MIB(free_bytes));
  Expect(total == limit, "B's total is the container's limit");
  Expect(free_bytes + hold <= total, "B's free memory leaves out what A holds");
  /* More than B has free, less than it would have if A were not there. */
  size_t ask = free_bytes + hold / 2;
  CUdeviceptr p = 0;
  CUresult r = cuMemAlloc(&p, ask);
  printf("B asks for %llu MiB (free + half of A's): %s\n", MIB(ask), ErrName(r));
  Expect(r == CUDA_ERROR_OUT_OF_MEMORY, "refused: together they would pass the limit");
  if (r == CUDA_SUCCESS) cuMemFree(p);

  close(to_child[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  fclose(from);
  CHECK(cuMemGetInfo(&free_bytes, &total));
  r = cuMemAlloc(&p, ask);
  printf("A exits; B sees %llu MiB free and asks again for %llu MiB: %s\n", MIB(free_bytes),
         MIB(ask), ErrName(r));
  Expect(r == CUDA_SUCCESS, "the budget A used is B's again");
  if (r == CUDA_SUCCESS) cuMemFree(p);
  return g_failed;
}

static int View(void) {
  CUdevice dev = StartContext();
  size_t free_bytes = 0, total = 0;
  CHECK(cuMemGetInfo(&free_bytes, &total));
  printf("cuMemGetInfo: total %llu MiB, free %llu MiB\n", MIB(total), MIB(free_bytes));
  nvmlMemory_t nvml;
  if (NvmlMemory(dev, &nvml)) {
    printf("NVML:         total %llu MiB, used %llu MiB\n", MIB(nvml.total), MIB(nvml.used));
  }
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 3 && strcmp(argv[1], "limit") == 0) return Limit(ParseBytes(argv[2]));
  if (argc == 4 && strcmp(argv[1], "share") == 0) {
    return Share(ParseBytes(argv[2]), ParseBytes(argv[3]));
  }
  if (argc == 3 && strcmp(argv[1], "hold") == 0) return Hold(ParseBytes(argv[2]));
  if (argc == 2 && strcmp(argv[1], "view") == 0) return View();
  if (argc == 3 && strcmp(argv[1], "probe") == 0) return Probe(ParseBytes(argv[2]));
  fprintf(stderr,
          "usage: hami-memory-demo limit LIMIT | share LIMIT HOLD | view | hold BYTES | probe "
          "BYTES\n");
  return 2;
}
