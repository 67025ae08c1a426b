# cmake -DSRC=<src/sim> -DLIBS=<libcuda.so.1;libnvidia-ml.so.1> -DNM=nm -P check_independence.cmake
# The simulator checks the product, so it must not reuse the product's code for what it
# checks: a misreading shared by both would pass every test. Fails when a simulator source
# (tests aside) includes one of the product headers below, or when a simulated library
# carries one of the product's functions (from any symbol table entry, local ones included).
# The simulator's own parser must be found, so that a stripped library cannot pass unread.
foreach(_v SRC LIBS NM)
  if(NOT DEFINED ${_v})
    message(FATAL_ERROR "check_independence.cmake: -D${_v}=... is required")
  endif()
endforeach()

# Product code with a counterpart written independently under src/sim.
set(_headers "common/visible_devices.h"  # CUDA_VISIBLE_DEVICES (sim/visible_devices.h)
             "common/proc.h"             # /proc: NStgid, PID namespaces (sim/procfs.h)
             "broker/client.h" "broker/server.h" "broker/protocol.h"  # host PIDs (sim/host_pid.h)
             "plugin/api.h" "plugin/types.h")  # the kubelet API's messages (sim/kubelet/convert.h)
set(_symbols "hami::ParseVisibleDevices" "hami::GpuUuidText")
set(_own_symbol "hami::sim::ParseVisibleDevices")

set(_problems "")
file(GLOB_RECURSE _sources RELATIVE ${SRC} ${SRC}/*.h ${SRC}/*.cc)
foreach(_f ${_sources})
  if(_f MATCHES "_test\\.cc$")
    continue()
  endif()
  file(STRINGS ${SRC}/${_f} _includes REGEX "^#include \"")
  foreach(_h ${_headers})
    if(_includes MATCHES "#include \"${_h}\"")
      list(APPEND _problems "src/sim/${_f} includes ${_h}")
    endif()
  endforeach()
endforeach()

foreach(_lib ${LIBS})
  execute_process(COMMAND ${NM} -C ${_lib} OUTPUT_VARIABLE _nm RESULT_VARIABLE _rc
                  ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${NM} -C ${_lib} failed: ${_err}")
  endif()
  foreach(_s ${_symbols})
    if(_nm MATCHES " ${_s}[(\\[]")
      list(APPEND _problems "${_lib} contains the product's ${_s}")
    endif()
  endforeach()
  if(_lib MATCHES "libcuda" AND NOT _nm MATCHES " ${_own_symbol}\\(")
    list(APPEND _problems "${_lib} has no ${_own_symbol} in its symbol table (stripped?), "
                          "so it cannot be checked")
  endif()
endforeach()

if(_problems)
  string(REPLACE ";" "\n  " _text "${_problems}")
  message(FATAL_ERROR "the simulator reuses product code it must check independently:\n  ${_text}")
endif()
message(STATUS "src/sim and ${LIBS}: none of [${_headers}] included, none of [${_symbols}] linked")
