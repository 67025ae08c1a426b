// Declarations the generated nvml_stubs.cc (scripts/gen_nvml_api.py) needs. Unlike the CUDA
// stubs (sim/cuda/stubs.h), the NVML stubs are untyped, `int name()`: this header must not
// include nvml/nvml.h, whose real signatures for the names the simulator models would conflict
// with the stubs' declarations.
#pragma once

namespace hami::sim {

// What an NVML function the simulation does not model returns: NVML_ERROR_NOT_SUPPORTED,
// after logging its name (at info level).
int NvmlNotModelled(const char* name);

}  // namespace hami::sim
