// The project's own declarations of the part of NVML (libnvidia-ml.so.1) that hami-cpp uses.
//
// Written for this project; no NVIDIA header text is copied. Names, values and struct layouts
// follow the binary interface of the real library (checked against the CUDA 13.0 / R580 NVML
// header and, for the legacy structs, the CUDA 8.0 one). Every struct layout is pinned by the
// size and offset assertions at the end of this file, for x86-64 Linux (LP64).
//
// Functions are declared under the symbol names the real library exports. Several calls exist
// in more than one version (nvmlDeviceGetCount and nvmlDeviceGetCount_v2, ...); this header
// declares each version explicitly, with the struct that version reads or writes, so that the
// simulator can define and the interposer can forward every version. The real header instead
// remaps the unversioned names to the newest versions with macros; define
// HAMI_NVML_VERSION_MACROS before including this file to get the same remapping.
//
// Usable from C (C11) and C++.
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// ------------------------------------------------------------------------------------------------
// Versioning helpers
// ------------------------------------------------------------------------------------------------

// API generation of the NVML release these declarations follow.
#define NVML_API_VERSION 13
#define NVML_API_VERSION_STR "13"

// The "version" word of a versioned struct: its size in the low bits, the version number in the
// top byte. `data` is the struct name without the nvml prefix and _vN_t suffix.
#ifdef __cplusplus
#define NVML_STRUCT_VERSION(data, ver)                        \
  static_cast<unsigned int>(sizeof(nvml##data##_v##ver##_t) | \
                            (static_cast<unsigned int>(ver) << 24U))
#else
#define NVML_STRUCT_VERSION(data, ver) \
  ((unsigned int)(sizeof(nvml##data##_v##ver##_t) | ((unsigned int)(ver) << 24U)))
#endif

// Marks a field value that the driver could not provide.
#define NVML_VALUE_NOT_AVAILABLE (-1)

// ------------------------------------------------------------------------------------------------
// Return codes
// ------------------------------------------------------------------------------------------------

typedef enum nvmlReturn_enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,               // nvmlInit* has not been called (or was shut down)
  NVML_ERROR_INVALID_ARGUMENT = 2,            // an argument is null or out of range
  NVML_ERROR_NOT_SUPPORTED = 3,               // the device cannot do this
  NVML_ERROR_NO_PERMISSION = 4,               // the caller lacks the privilege
  NVML_ERROR_ALREADY_INITIALIZED = 5,         // obsolete; init is reference counted now
  NVML_ERROR_NOT_FOUND = 6,                   // no object matches the query
  NVML_ERROR_INSUFFICIENT_SIZE = 7,           // an output buffer or count is too small
  NVML_ERROR_INSUFFICIENT_POWER = 8,          // external power cables not attached properly
  NVML_ERROR_DRIVER_NOT_LOADED = 9,           // the kernel driver is not loaded
  NVML_ERROR_TIMEOUT = 10,                    // a wait ran out of time
  NVML_ERROR_IRQ_ISSUE = 11,                  // the kernel saw an interrupt problem on a GPU
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,          // a shared library could not be loaded
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,         // this library version lacks the function
  NVML_ERROR_CORRUPTED_INFOROM = 14,          // the infoROM is corrupted
  NVML_ERROR_GPU_IS_LOST = 15,                // the GPU fell off the bus or is unreachable
  NVML_ERROR_RESET_REQUIRED = 16,             // the GPU must be reset before further use
  NVML_ERROR_OPERATING_SYSTEM = 17,           // the OS (or a cgroup) blocked access
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,    // library and kernel driver versions differ
  NVML_ERROR_IN_USE = 19,                     // the GPU is busy with something that blocks this
  NVML_ERROR_MEMORY = 20,                     // out of host memory
  NVML_ERROR_NO_DATA = 21,                    // nothing to report
  NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,     // vGPU operation refused because ECC is on
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,     // out of some non-memory resource
  NVML_ERROR_FREQ_NOT_SUPPORTED = 24,         // the requested frequency is not supported
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,  // a versioned struct has an unknown version
  NVML_ERROR_DEPRECATED = 26,                 // the functionality was withdrawn
  NVML_ERROR_NOT_READY = 27,                  // the system is not ready yet
  NVML_ERROR_GPU_NOT_FOUND = 28,              // no GPUs present
  NVML_ERROR_INVALID_STATE = 29,              // the object is in the wrong state for this
  NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,   // the requested kind of reset is not supported
  NVML_ERROR_UNKNOWN = 999,                   // any other driver failure
} nvmlReturn_t;

// ------------------------------------------------------------------------------------------------
// Handles and buffer sizes
// ------------------------------------------------------------------------------------------------

// Opaque handles; the library hands out pointers to its own objects.
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlEventSet_st* nvmlEventSet_t;

// Flags for nvmlInitWithFlags.
#define NVML_INIT_FLAG_NO_GPUS 1    // succeed even when no GPU is present
#define NVML_INIT_FLAG_NO_ATTACH 2  // do not attach to the GPUs during init

// Sizes, including the terminating NUL, that are always large enough for the string outputs.
#define NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE 16
#define NVML_DEVICE_UUID_BUFFER_SIZE 80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96  // nvmlDeviceGetUUID (covers MIG UUIDs)
#define NVML_DEVICE_PART_NUMBER_BUFFER_SIZE 80
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE 80
#define NVML_DEVICE_NAME_BUFFER_SIZE 64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96  // nvmlDeviceGetName (covers MIG names)
#define NVML_DEVICE_SERIAL_BUFFER_SIZE 30
#define NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32     // nvmlPciInfo_t.busId
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16  // nvmlPciInfo_t.busIdLegacy

// printf formats for the PCI bus id strings: busIdLegacy has a 4-digit domain, busId an 8-digit
// one. NVML_DEVICE_PCI_BUS_ID_FMT_ARGS expands to the domain, bus and device of a PCI info
// pointer, in that order.
#define NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT "%04X:%02X:%02X.0"
#define NVML_DEVICE_PCI_BUS_ID_FMT "%08X:%02X:%02X.0"
#define NVML_DEVICE_PCI_BUS_ID_FMT_ARGS(pci_info) \
  (pci_info)->domain, (pci_info)->bus, (pci_info)->device

// Split the integer from nvmlSystemGetCudaDriverVersion (e.g. 13000) into major and minor.
#define NVML_CUDA_DRIVER_VERSION_MAJOR(v) ((v) / 1000)
#define NVML_CUDA_DRIVER_VERSION_MINOR(v) (((v) % 1000) / 10)

// ------------------------------------------------------------------------------------------------
// Enumerations and constants
// ------------------------------------------------------------------------------------------------

typedef enum nvmlEnableState_enum {
  NVML_FEATURE_DISABLED = 0,
  NVML_FEATURE_ENABLED = 1,
} nvmlEnableState_t;

typedef enum nvmlBrandType_enum {
  NVML_BRAND_UNKNOWN = 0,
  NVML_BRAND_QUADRO = 1,
  NVML_BRAND_TESLA = 2,
  NVML_BRAND_NVS = 3,
  NVML_BRAND_GRID = 4,  // no longer reported
  NVML_BRAND_GEFORCE = 5,
  NVML_BRAND_TITAN = 6,
  NVML_BRAND_NVIDIA_VAPPS = 7,
  NVML_BRAND_NVIDIA_VPC = 8,
  NVML_BRAND_NVIDIA_VCS = 9,
  NVML_BRAND_NVIDIA_VWS = 10,
  NVML_BRAND_NVIDIA_CLOUD_GAMING = 11,
  NVML_BRAND_NVIDIA_VGAMING = NVML_BRAND_NVIDIA_CLOUD_GAMING,  // old name
  NVML_BRAND_QUADRO_RTX = 12,
  NVML_BRAND_NVIDIA_RTX = 13,
  NVML_BRAND_NVIDIA = 14,
  NVML_BRAND_GEFORCE_RTX = 15,
  NVML_BRAND_TITAN_RTX = 16,
  NVML_BRAND_COUNT = 18,  // 18, not 17, in the real header
} nvmlBrandType_t;

typedef enum nvmlTemperatureSensors_enum {
  NVML_TEMPERATURE_GPU = 0,  // the GPU die
  NVML_TEMPERATURE_COUNT,
} nvmlTemperatureSensors_t;

// Clock domains; all clock values are in MHz.
typedef enum nvmlClockType_enum {
  NVML_CLOCK_GRAPHICS = 0,
  NVML_CLOCK_SM = 1,
  NVML_CLOCK_MEM = 2,
  NVML_CLOCK_VIDEO = 3,
  NVML_CLOCK_COUNT,
} nvmlClockType_t;

// How closely two GPUs are connected; a smaller value is closer. The gaps are deliberate.
typedef enum nvmlGpuLevel_enum {
  NVML_TOPOLOGY_INTERNAL = 0,     // on the same board (multi-GPU boards)
  NVML_TOPOLOGY_SINGLE = 10,      // through one PCIe switch
  NVML_TOPOLOGY_MULTIPLE = 20,    // through several PCIe switches, no host bridge
  NVML_TOPOLOGY_HOSTBRIDGE = 30,  // through one host bridge
  NVML_TOPOLOGY_NODE = 40,        // within one NUMA node, across host bridges
  NVML_TOPOLOGY_SYSTEM = 50,      // anywhere in the system (across NUMA nodes)
} nvmlGpuTopologyLevel_t;

#define NVML_TOPOLOGY_CPU NVML_TOPOLOGY_NODE  // earlier name of NVML_TOPOLOGY_NODE

typedef enum nvmlGpuP2PStatus_enum {
  NVML_P2P_STATUS_OK = 0,
  NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED = 1,  // sic, the real spelling
  NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED,
  NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2,
  NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3,
  NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4,
  NVML_P2P_STATUS_NOT_SUPPORTED = 5,
  NVML_P2P_STATUS_UNKNOWN = 6,
} nvmlGpuP2PStatus_t;

typedef enum nvmlGpuP2PCapsIndex_enum {
  NVML_P2P_CAPS_INDEX_READ = 0,
  NVML_P2P_CAPS_INDEX_WRITE = 1,
  NVML_P2P_CAPS_INDEX_NVLINK = 2,
  NVML_P2P_CAPS_INDEX_ATOMICS = 3,
  NVML_P2P_CAPS_INDEX_PCI = 4,
  NVML_P2P_CAPS_INDEX_PROP = NVML_P2P_CAPS_INDEX_PCI,  // deprecated name
  NVML_P2P_CAPS_INDEX_UNKNOWN = 5,
} nvmlGpuP2PCapsIndex_t;

// Scope for nvmlDeviceGetCpuAffinityWithinScope and nvmlDeviceGetMemoryAffinity.
typedef unsigned int nvmlAffinityScope_t;
#define NVML_AFFINITY_SCOPE_NODE 0    // the NUMA node
#define NVML_AFFINITY_SCOPE_SOCKET 1  // the processor socket

typedef enum nvmlComputeMode_enum {
  NVML_COMPUTEMODE_DEFAULT = 0,            // any number of contexts
  NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1,   // no longer supported
  NVML_COMPUTEMODE_PROHIBITED = 2,         // no contexts
  NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3,  // one context, shareable by its process's threads
  NVML_COMPUTEMODE_COUNT,
} nvmlComputeMode_t;

// Performance states; P0 is the fastest, P15 the slowest.
typedef enum nvmlPStates_enum {
  NVML_PSTATE_0 = 0,
  NVML_PSTATE_1 = 1,
  NVML_PSTATE_2 = 2,
  NVML_PSTATE_3 = 3,
  NVML_PSTATE_4 = 4,
  NVML_PSTATE_5 = 5,
  NVML_PSTATE_6 = 6,
  NVML_PSTATE_7 = 7,
  NVML_PSTATE_8 = 8,
  NVML_PSTATE_9 = 9,
  NVML_PSTATE_10 = 10,
  NVML_PSTATE_11 = 11,
  NVML_PSTATE_12 = 12,
  NVML_PSTATE_13 = 13,
  NVML_PSTATE_14 = 14,
  NVML_PSTATE_15 = 15,
  NVML_PSTATE_UNKNOWN = 32,
} nvmlPstates_t;

// GPU architecture, as returned by nvmlDeviceGetArchitecture.
typedef unsigned int nvmlDeviceArchitecture_t;
#define NVML_DEVICE_ARCH_KEPLER 2
#define NVML_DEVICE_ARCH_MAXWELL 3
#define NVML_DEVICE_ARCH_PASCAL 4
#define NVML_DEVICE_ARCH_VOLTA 5
#define NVML_DEVICE_ARCH_TURING 6
#define NVML_DEVICE_ARCH_AMPERE 7
#define NVML_DEVICE_ARCH_ADA 8
#define NVML_DEVICE_ARCH_HOPPER 9
#define NVML_DEVICE_ARCH_BLACKWELL 10
#define NVML_DEVICE_ARCH_UNKNOWN 0xffffffff

// MIG mode values for nvmlDeviceGetMigMode.
#define NVML_DEVICE_MIG_DISABLE 0x0
#define NVML_DEVICE_MIG_ENABLE 0x1

// Event type bits for nvmlDeviceRegisterEvents / nvmlDeviceGetSupportedEventTypes and
// nvmlEventData_t.eventType. They are 64-bit masks; OR them together to register several.
#define nvmlEventTypeNone 0x0000000000000000LL
#define nvmlEventTypeSingleBitEccError 0x0000000000000001LL
#define nvmlEventTypeDoubleBitEccError 0x0000000000000002LL
#define nvmlEventTypePState 0x0000000000000004LL
#define nvmlEventTypeXidCriticalError 0x0000000000000008LL  // eventData holds the Xid
#define nvmlEventTypeClock 0x0000000000000010LL
#define nvmlEventTypePowerSourceChange 0x0000000000000080LL
#define nvmlEventMigConfigChange 0x0000000000000100LL  // no "Type" in the real name
#define nvmlEventTypeSingleBitEccErrorStorm 0x0000000000000200LL
#define nvmlEventTypeDramRetirementEvent 0x0000000000000400LL
#define nvmlEventTypeDramRetirementFailure 0x0000000000000800LL
#define nvmlEventTypeNonFatalPoisonError 0x0000000000001000LL
#define nvmlEventTypeFatalPoisonError 0x0000000000002000LL
#define nvmlEventTypeGpuUnavailableError 0x0000000000004000LL
#define nvmlEventTypeGpuRecoveryAction 0x0000000000008000LL
#define nvmlEventTypeAll                                                                 \
  (nvmlEventTypeNone | nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | \
   nvmlEventTypePState | nvmlEventTypeClock | nvmlEventTypeXidCriticalError |            \
   nvmlEventTypePowerSourceChange | nvmlEventMigConfigChange |                           \
   nvmlEventTypeSingleBitEccErrorStorm | nvmlEventTypeDramRetirementEvent |              \
   nvmlEventTypeDramRetirementFailure | nvmlEventTypeNonFatalPoisonError |               \
   nvmlEventTypeFatalPoisonError | nvmlEventTypeGpuUnavailableError |                    \
   nvmlEventTypeGpuRecoveryAction)

// Process kinds for nvmlProcessDetailList_v1_t.mode.
#define NVML_PROCESS_MODE_COMPUTE 0
#define NVML_PROCESS_MODE_GRAPHICS 1
#define NVML_PROCESS_MODE_MPS 2

// ------------------------------------------------------------------------------------------------
// Structs
// ------------------------------------------------------------------------------------------------

// Device memory in bytes; total == free + used. Taken by nvmlDeviceGetMemoryInfo.
typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;  // includes the memory the driver reserves for itself
} nvmlMemory_t;

// Device memory in bytes, with the reserved part split out; used includes reserved.
// Taken by nvmlDeviceGetMemoryInfo_v2; the caller sets version to nvmlMemory_v2.
typedef struct nvmlMemory_v2_st {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;  // set aside by the driver and firmware
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_v2_t;

#define nvmlMemory_v2 NVML_STRUCT_VERSION(Memory, 2)

// Percent of the last sample period in which kernels ran (gpu) or device memory was read or
// written (memory). Taken by nvmlDeviceGetUtilizationRates.
typedef struct nvmlUtilization_st {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;

// BAR1 aperture in bytes. Taken by nvmlDeviceGetBAR1MemoryInfo.
typedef struct nvmlBAR1Memory_st {
  unsigned long long bar1Total;
  unsigned long long bar1Free;
  unsigned long long bar1Used;
} nvmlBAR1Memory_t;

// One running process, first layout. Taken by the unversioned nvmlDeviceGetComputeRunningProcesses,
// nvmlDeviceGetGraphicsRunningProcesses and nvmlDeviceGetMPSComputeRunningProcesses.
typedef struct nvmlProcessInfo_v1_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;  // bytes; NVML_VALUE_NOT_AVAILABLE where not known
} nvmlProcessInfo_v1_t;

// One running process, with its MIG placement (0xFFFFFFFF in both ids when MIG is off).
// Taken by the _v2 and the _v3 versions of the three running-process queries: the current
// header defines nvmlProcessInfo_t as this very struct, so _v3 did not change the layout.
typedef struct nvmlProcessInfo_v2_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;

typedef nvmlProcessInfo_v2_t nvmlProcessInfo_t;

// One running process with its confidential-computing protected memory.
typedef struct nvmlProcessDetail_v1_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
  unsigned long long usedGpuCcProtectedMemory;
} nvmlProcessDetail_v1_t;

// Request and answer of nvmlDeviceGetRunningProcessDetailList. The caller sets version to
// nvmlProcessDetailList_v1, mode to one of NVML_PROCESS_MODE_*, and procArray to an array of
// numProcArrayEntries entries; the call sets numProcArrayEntries to the number filled in.
typedef struct nvmlProcessDetailList_v1_st {
  unsigned int version;
  unsigned int mode;
  unsigned int numProcArrayEntries;
  nvmlProcessDetail_v1_t* procArray;
} nvmlProcessDetailList_v1_t;

typedef nvmlProcessDetailList_v1_t nvmlProcessDetailList_t;

#define nvmlProcessDetailList_v1 NVML_STRUCT_VERSION(ProcessDetailList, 1)

// Per-process utilization sample. Taken by nvmlDeviceGetProcessUtilization.
typedef struct nvmlProcessUtilizationSample_st {
  unsigned int pid;
  unsigned long long timeStamp;  // CPU time of the sample, microseconds
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

// Per-process utilization sample, with the JPEG and optical-flow engines. Entry of
// nvmlProcessesUtilizationInfo_v1_t.procUtilArray.
typedef struct nvmlProcessUtilizationInfo_v1_st {
  unsigned long long timeStamp;  // CPU time of the sample, microseconds
  unsigned int pid;
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
  unsigned int jpgUtil;
  unsigned int ofaUtil;
} nvmlProcessUtilizationInfo_v1_t;

// Request and answer of nvmlDeviceGetProcessesUtilizationInfo. The caller sets version to
// nvmlProcessesUtilizationInfo_v1, lastSeenTimeStamp (0: every sample kept) and procUtilArray
// to an array of processSamplesCount entries; the call sets processSamplesCount to the number
// filled in, or to the number needed with NVML_ERROR_INSUFFICIENT_SIZE.
typedef struct nvmlProcessesUtilizationInfo_v1_st {
  unsigned int version;
  unsigned int processSamplesCount;
  unsigned long long lastSeenTimeStamp;  // microseconds, as timeStamp
  nvmlProcessUtilizationInfo_v1_t* procUtilArray;
} nvmlProcessesUtilizationInfo_v1_t;

typedef nvmlProcessesUtilizationInfo_v1_t nvmlProcessesUtilizationInfo_t;

#define nvmlProcessesUtilizationInfo_v1 NVML_STRUCT_VERSION(ProcessesUtilizationInfo, 1)

// What per-process accounting recorded of one process on a device, over its lifetime.
// Taken by nvmlDeviceGetAccountingStats.
typedef struct nvmlAccountingStats_st {
  unsigned int gpuUtilization;        // percent of its lifetime with a kernel running
  unsigned int memoryUtilization;     // percent of its lifetime with device memory busy
  unsigned long long maxMemoryUsage;  // bytes, the most it ever held
  unsigned long long time;            // ms its context was active; 0 while it runs
  unsigned long long startTime;       // CPU time it started, microseconds
  unsigned int isRunning;             // 1 running, 0 terminated
  unsigned int reserved[5];
} nvmlAccountingStats_t;

// PCI identity of a device, current layout. Taken by nvmlDeviceGetPciInfo_v3.
typedef struct nvmlPciInfo_st {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];  // NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;     // device id in the high 16 bits, vendor id in the low 16
  unsigned int pciSubSystemId;  // subsystem device id high, subsystem vendor id low
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];  // NVML_DEVICE_PCI_BUS_ID_FMT
} nvmlPciInfo_t;

// PCI identity of a device, the layout from before the 32-byte busId (CUDA 8 and older headers,
// where it was called nvmlPciInfo_t). Taken by the unversioned nvmlDeviceGetPciInfo and by
// nvmlDeviceGetPciInfo_v2: programs built against those headers pass a 52-byte buffer, so these
// two versions must not write the 68-byte current layout. The first 36 bytes match
// nvmlPciInfo_t (busId here sits where busIdLegacy sits there). The current real header
// declares both functions with nvmlPciInfo_t, which does not describe what old callers pass.
// hami-specific name; the real library has no name for it any more.
typedef struct hamiNvmlPciInfoLegacy_st {
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];  // NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  unsigned int reserved0;
  unsigned int reserved1;
  unsigned int reserved2;
  unsigned int reserved3;
} hamiNvmlPciInfoLegacy_t;

// One delivered event, current layout (MIG ids are 0xFFFFFFFF when not attributable). Taken by
// nvmlEventSetWait_v2.
typedef struct nvmlEventData_st {
  nvmlDevice_t device;
  unsigned long long eventType;  // one nvmlEventType* bit
  unsigned long long eventData;  // the Xid for nvmlEventTypeXidCriticalError (999 if unknown)
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlEventData_t;

// One delivered event, the layout from before MIG (CUDA 10 and older headers, where it was
// called nvmlEventData_t). Taken by the unversioned nvmlEventSetWait, which old programs call
// with a 24-byte buffer; the current real header declares it with nvmlEventData_t.
// hami-specific name.
typedef struct hamiNvmlEventDataLegacy_st {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
} hamiNvmlEventDataLegacy_t;

// ------------------------------------------------------------------------------------------------
// Functions, under their exported symbol names
// ------------------------------------------------------------------------------------------------

// Initialization. nvmlInit is the pre-5.319 entry point that also attached every GPU.
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlInit(void);
nvmlReturn_t nvmlInitWithFlags(unsigned int flags);  // NVML_INIT_FLAG_*
nvmlReturn_t nvmlShutdown(void);

// Returns a static string; never null, never freed. Not an nvmlReturn_t function.
const char* nvmlErrorString(nvmlReturn_t result);

// System queries.
nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length);
nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length);
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* cudaDriverVersion);
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* cudaDriverVersion);  // asks libcuda itself
nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char* name, unsigned int length);

// Enumeration. The unversioned count and index calls skip devices the caller may not open;
// the _v2 ones count them and fail with NVML_ERROR_NO_PERMISSION on open instead.
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount);
nvmlReturn_t nvmlDeviceGetCount(unsigned int* deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* pciBusId, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetHandleBySerial(const char* serial, nvmlDevice_t* device);

// Identity.
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length);
nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char* serial, unsigned int length);
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index);
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minorNumber);
nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t* type);
nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t* arch);
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor);

// Memory and utilization.
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory);
nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t* bar1Memory);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization);
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t* utilization,
                                             unsigned int* processSamplesCount,
                                             unsigned long long lastSeenTimeStamp);
nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(
    nvmlDevice_t device, nvmlProcessesUtilizationInfo_t* processesUtilInfo);

// Per-process accounting: while the mode is on, the driver keeps a record of each process that
// ran on the device (a ring of nvmlDeviceGetAccountingBufferSize records, terminated processes
// included). nvmlDeviceGetAccountingPids lists the PIDs it holds (*count is the capacity of
// pids on entry, the number of PIDs on return); nvmlDeviceGetAccountingStats answers
// NVML_ERROR_NOT_FOUND for a PID it holds no record of. Both are NVML_ERROR_NOT_SUPPORTED while
// the mode is off. Setting the mode needs root; turning it off drops every record.
nvmlReturn_t nvmlDeviceGetAccountingMode(nvmlDevice_t device, nvmlEnableState_t* mode);
nvmlReturn_t nvmlDeviceSetAccountingMode(nvmlDevice_t device, nvmlEnableState_t mode);
nvmlReturn_t nvmlDeviceGetAccountingBufferSize(nvmlDevice_t device, unsigned int* bufferSize);
nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t device, unsigned int* count,
                                         unsigned int* pids);
nvmlReturn_t nvmlDeviceGetAccountingStats(nvmlDevice_t device, unsigned int pid,
                                          nvmlAccountingStats_t* stats);

// Running processes. *infoCount is the capacity of infos on entry and the number of processes
// on return; the struct differs by version (see nvmlProcessInfo_v1_t / _v2_t above).
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                  nvmlProcessInfo_v1_t* infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_v2_t* infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_t* infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                   nvmlProcessInfo_v1_t* infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                      nvmlProcessInfo_v2_t* infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                      nvmlProcessInfo_t* infos);
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_v1_t* infos);
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device,
                                                        unsigned int* infoCount,
                                                        nvmlProcessInfo_v2_t* infos);
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device,
                                                        unsigned int* infoCount,
                                                        nvmlProcessInfo_t* infos);
nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device,
                                                   nvmlProcessDetailList_t* plist);

// PCI. The unversioned call and _v2 write the 52-byte legacy layout, _v3 the 68-byte one.
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, hamiNvmlPciInfoLegacy_t* pci);
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, hamiNvmlPciInfoLegacy_t* pci);
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci);
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int* currLinkGen);
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int* currLinkWidth);

// Topology and affinity. The sets are arrays of unsigned long bitmasks (64 CPUs or NUMA nodes
// per element on LP64), cpuSetSize / nodeSetSize elements long.
nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int* node);
nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize,
                                      unsigned long* cpuSet);
nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t device, unsigned int cpuSetSize,
                                                 unsigned long* cpuSet, nvmlAffinityScope_t scope);
nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int nodeSetSize,
                                         unsigned long* nodeSet, nvmlAffinityScope_t scope);
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                 nvmlGpuTopologyLevel_t* pathInfo);
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                    nvmlGpuP2PCapsIndex_t p2pIndex, nvmlGpuP2PStatus_t* p2pStatus);

// MIG. Modes are NVML_DEVICE_MIG_DISABLE / NVML_DEVICE_MIG_ENABLE.
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode,
                                  unsigned int* pendingMode);
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count);
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int* isMigDevice);
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t* migDevice);
nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                          nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id);
nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id);

// Modes, sensors and clocks. Power values are in milliwatts, temperatures in degrees C,
// fan speed in percent of the maximum.
nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t* mode);
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t* mode);
nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t* current,
                                  nvmlEnableState_t* pending);
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int* temp);
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power);
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int* limit);
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int* clock);
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                       unsigned int* clock);
nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t* pState);
nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int* speed);
nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int* numCores);

// Events. nvmlEventSetWait_v2 fills the current nvmlEventData_t; the unversioned
// nvmlEventSetWait fills the 24-byte legacy layout.
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set);
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set);
nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long* eventTypes);
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms);
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, hamiNvmlEventDataLegacy_t* data,
                              unsigned int timeoutms);
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set);

// ------------------------------------------------------------------------------------------------
// Optional remapping of unversioned names, as the real header does by default
// ------------------------------------------------------------------------------------------------

// Defined after the prototypes above so that both versions of each call stay declared. With
// the remapping on, nvmlDeviceGetPciInfo takes nvmlPciInfo_t and nvmlEventSetWait takes
// nvmlEventData_t, as in programs built against the real header.
#ifdef HAMI_NVML_VERSION_MACROS
#define nvmlInit nvmlInit_v2
#define nvmlDeviceGetCount nvmlDeviceGetCount_v2
#define nvmlDeviceGetHandleByIndex nvmlDeviceGetHandleByIndex_v2
#define nvmlDeviceGetHandleByPciBusId nvmlDeviceGetHandleByPciBusId_v2
#define nvmlDeviceGetPciInfo nvmlDeviceGetPciInfo_v3
#define nvmlEventSetWait nvmlEventSetWait_v2
#define nvmlDeviceGetComputeRunningProcesses nvmlDeviceGetComputeRunningProcesses_v3
#define nvmlDeviceGetGraphicsRunningProcesses nvmlDeviceGetGraphicsRunningProcesses_v3
#define nvmlDeviceGetMPSComputeRunningProcesses nvmlDeviceGetMPSComputeRunningProcesses_v3
#endif  // HAMI_NVML_VERSION_MACROS

#ifdef __cplusplus
}  // extern "C"
#endif

// ------------------------------------------------------------------------------------------------
// ABI checks: sizes and offsets of the real library on x86-64 Linux
// ------------------------------------------------------------------------------------------------

#if defined(__x86_64__) && defined(__linux__)

#ifdef __cplusplus
#define HAMI_NVML_ABI_CHECK(cond) static_assert(cond, #cond)
#else
#define HAMI_NVML_ABI_CHECK(cond) _Static_assert(cond, #cond)
#endif

HAMI_NVML_ABI_CHECK(sizeof(nvmlReturn_t) == 4);
HAMI_NVML_ABI_CHECK(sizeof(nvmlDevice_t) == 8);
HAMI_NVML_ABI_CHECK(sizeof(nvmlEventSet_t) == 8);
HAMI_NVML_ABI_CHECK(sizeof(nvmlEnableState_t) == 4);
HAMI_NVML_ABI_CHECK(sizeof(nvmlBrandType_t) == 4);
HAMI_NVML_ABI_CHECK(sizeof(nvmlTemperatureSensors_t) == 4);
HAMI_NVML_ABI_CHECK(sizeof(nvmlClockType_t) == 4);
HAMI_NVML_ABI_CHECK(sizeof(nvmlGpuTopologyLevel_t) == 4);
HAMI_NVML_ABI_CHECK(sizeof(nvmlGpuP2PStatus_t) == 4);
HAMI_NVML_ABI_CHECK(sizeof(nvmlGpuP2PCapsIndex_t) == 4);
HAMI_NVML_ABI_CHECK(sizeof(nvmlComputeMode_t) == 4);
HAMI_NVML_ABI_CHECK(sizeof(nvmlPstates_t) == 4);
HAMI_NVML_ABI_CHECK(NVML_ERROR_RESET_TYPE_NOT_SUPPORTED == 30);
HAMI_NVML_ABI_CHECK(NVML_ERROR_UNKNOWN == 999);

HAMI_NVML_ABI_CHECK(sizeof(nvmlMemory_t) == 24);
HAMI_NVML_ABI_CHECK(offsetof(nvmlMemory_t, total) == 0);
HAMI_NVML_ABI_CHECK(offsetof(nvmlMemory_t, free) == 8);
HAMI_NVML_ABI_CHECK(offsetof(nvmlMemory_t, used) == 16);

HAMI_NVML_ABI_CHECK(sizeof(nvmlMemory_v2_t) == 40);
HAMI_NVML_ABI_CHECK(offsetof(nvmlMemory_v2_t, version) == 0);
HAMI_NVML_ABI_CHECK(offsetof(nvmlMemory_v2_t, total) == 8);
HAMI_NVML_ABI_CHECK(offsetof(nvmlMemory_v2_t, reserved) == 16);
HAMI_NVML_ABI_CHECK(offsetof(nvmlMemory_v2_t, free) == 24);
HAMI_NVML_ABI_CHECK(offsetof(nvmlMemory_v2_t, used) == 32);
HAMI_NVML_ABI_CHECK(nvmlMemory_v2 == 0x02000028U);

HAMI_NVML_ABI_CHECK(sizeof(nvmlUtilization_t) == 8);
HAMI_NVML_ABI_CHECK(offsetof(nvmlUtilization_t, gpu) == 0);
HAMI_NVML_ABI_CHECK(offsetof(nvmlUtilization_t, memory) == 4);

HAMI_NVML_ABI_CHECK(sizeof(nvmlBAR1Memory_t) == 24);
HAMI_NVML_ABI_CHECK(offsetof(nvmlBAR1Memory_t, bar1Total) == 0);
HAMI_NVML_ABI_CHECK(offsetof(nvmlBAR1Memory_t, bar1Free) == 8);
HAMI_NVML_ABI_CHECK(offsetof(nvmlBAR1Memory_t, bar1Used) == 16);

HAMI_NVML_ABI_CHECK(sizeof(nvmlProcessInfo_v1_t) == 16);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessInfo_v1_t, pid) == 0);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessInfo_v1_t, usedGpuMemory) == 8);

HAMI_NVML_ABI_CHECK(sizeof(nvmlProcessInfo_v2_t) == 24);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessInfo_v2_t, pid) == 0);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessInfo_v2_t, usedGpuMemory) == 8);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessInfo_v2_t, gpuInstanceId) == 16);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessInfo_v2_t, computeInstanceId) == 20);
HAMI_NVML_ABI_CHECK(sizeof(nvmlProcessInfo_t) == 24);

HAMI_NVML_ABI_CHECK(sizeof(nvmlProcessDetail_v1_t) == 32);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessDetail_v1_t, pid) == 0);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessDetail_v1_t, usedGpuMemory) == 8);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessDetail_v1_t, gpuInstanceId) == 16);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessDetail_v1_t, computeInstanceId) == 20);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessDetail_v1_t, usedGpuCcProtectedMemory) == 24);

HAMI_NVML_ABI_CHECK(sizeof(nvmlProcessDetailList_v1_t) == 24);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessDetailList_v1_t, version) == 0);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessDetailList_v1_t, mode) == 4);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessDetailList_v1_t, numProcArrayEntries) == 8);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessDetailList_v1_t, procArray) == 16);
HAMI_NVML_ABI_CHECK(nvmlProcessDetailList_v1 == 0x01000018U);

HAMI_NVML_ABI_CHECK(sizeof(nvmlProcessUtilizationSample_t) == 32);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessUtilizationSample_t, pid) == 0);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessUtilizationSample_t, timeStamp) == 8);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessUtilizationSample_t, smUtil) == 16);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessUtilizationSample_t, memUtil) == 20);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessUtilizationSample_t, encUtil) == 24);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessUtilizationSample_t, decUtil) == 28);

HAMI_NVML_ABI_CHECK(sizeof(nvmlProcessUtilizationInfo_v1_t) == 40);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessUtilizationInfo_v1_t, timeStamp) == 0);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessUtilizationInfo_v1_t, pid) == 8);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessUtilizationInfo_v1_t, smUtil) == 12);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessUtilizationInfo_v1_t, memUtil) == 16);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessUtilizationInfo_v1_t, encUtil) == 20);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessUtilizationInfo_v1_t, decUtil) == 24);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessUtilizationInfo_v1_t, jpgUtil) == 28);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessUtilizationInfo_v1_t, ofaUtil) == 32);

HAMI_NVML_ABI_CHECK(sizeof(nvmlProcessesUtilizationInfo_v1_t) == 24);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessesUtilizationInfo_v1_t, version) == 0);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessesUtilizationInfo_v1_t, processSamplesCount) == 4);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessesUtilizationInfo_v1_t, lastSeenTimeStamp) == 8);
HAMI_NVML_ABI_CHECK(offsetof(nvmlProcessesUtilizationInfo_v1_t, procUtilArray) == 16);
HAMI_NVML_ABI_CHECK(nvmlProcessesUtilizationInfo_v1 == 0x01000018U);

HAMI_NVML_ABI_CHECK(sizeof(nvmlAccountingStats_t) == 56);
HAMI_NVML_ABI_CHECK(offsetof(nvmlAccountingStats_t, gpuUtilization) == 0);
HAMI_NVML_ABI_CHECK(offsetof(nvmlAccountingStats_t, memoryUtilization) == 4);
HAMI_NVML_ABI_CHECK(offsetof(nvmlAccountingStats_t, maxMemoryUsage) == 8);
HAMI_NVML_ABI_CHECK(offsetof(nvmlAccountingStats_t, time) == 16);
HAMI_NVML_ABI_CHECK(offsetof(nvmlAccountingStats_t, startTime) == 24);
HAMI_NVML_ABI_CHECK(offsetof(nvmlAccountingStats_t, isRunning) == 32);
HAMI_NVML_ABI_CHECK(offsetof(nvmlAccountingStats_t, reserved) == 36);

HAMI_NVML_ABI_CHECK(sizeof(nvmlPciInfo_t) == 68);
HAMI_NVML_ABI_CHECK(offsetof(nvmlPciInfo_t, busIdLegacy) == 0);
HAMI_NVML_ABI_CHECK(offsetof(nvmlPciInfo_t, domain) == 16);
HAMI_NVML_ABI_CHECK(offsetof(nvmlPciInfo_t, bus) == 20);
HAMI_NVML_ABI_CHECK(offsetof(nvmlPciInfo_t, device) == 24);
HAMI_NVML_ABI_CHECK(offsetof(nvmlPciInfo_t, pciDeviceId) == 28);
HAMI_NVML_ABI_CHECK(offsetof(nvmlPciInfo_t, pciSubSystemId) == 32);
HAMI_NVML_ABI_CHECK(offsetof(nvmlPciInfo_t, busId) == 36);

HAMI_NVML_ABI_CHECK(sizeof(hamiNvmlPciInfoLegacy_t) == 52);
HAMI_NVML_ABI_CHECK(offsetof(hamiNvmlPciInfoLegacy_t, busId) == 0);
HAMI_NVML_ABI_CHECK(offsetof(hamiNvmlPciInfoLegacy_t, domain) == 16);
HAMI_NVML_ABI_CHECK(offsetof(hamiNvmlPciInfoLegacy_t, bus) == 20);
HAMI_NVML_ABI_CHECK(offsetof(hamiNvmlPciInfoLegacy_t, device) == 24);
HAMI_NVML_ABI_CHECK(offsetof(hamiNvmlPciInfoLegacy_t, pciDeviceId) == 28);
HAMI_NVML_ABI_CHECK(offsetof(hamiNvmlPciInfoLegacy_t, pciSubSystemId) == 32);
HAMI_NVML_ABI_CHECK(offsetof(hamiNvmlPciInfoLegacy_t, reserved0) == 36);
HAMI_NVML_ABI_CHECK(offsetof(hamiNvmlPciInfoLegacy_t, reserved1) == 40);
HAMI_NVML_ABI_CHECK(offsetof(hamiNvmlPciInfoLegacy_t, reserved2) == 44);
HAMI_NVML_ABI_CHECK(offsetof(hamiNvmlPciInfoLegacy_t, reserved3) == 48);

HAMI_NVML_ABI_CHECK(sizeof(nvmlEventData_t) == 32);
HAMI_NVML_ABI_CHECK(offsetof(nvmlEventData_t, device) == 0);
HAMI_NVML_ABI_CHECK(offsetof(nvmlEventData_t, eventType) == 8);
HAMI_NVML_ABI_CHECK(offsetof(nvmlEventData_t, eventData) == 16);
HAMI_NVML_ABI_CHECK(offsetof(nvmlEventData_t, gpuInstanceId) == 24);
HAMI_NVML_ABI_CHECK(offsetof(nvmlEventData_t, computeInstanceId) == 28);

HAMI_NVML_ABI_CHECK(sizeof(hamiNvmlEventDataLegacy_t) == 24);
HAMI_NVML_ABI_CHECK(offsetof(hamiNvmlEventDataLegacy_t, device) == 0);
HAMI_NVML_ABI_CHECK(offsetof(hamiNvmlEventDataLegacy_t, eventType) == 8);
HAMI_NVML_ABI_CHECK(offsetof(hamiNvmlEventDataLegacy_t, eventData) == 16);

#undef HAMI_NVML_ABI_CHECK

#endif  // defined(__x86_64__) && defined(__linux__)
