# cmake -DLIB=libx.so -DMAP=x.map -DNM=nm -P check_exports.cmake
# Fails unless the library's defined dynamic symbols are exactly the names the version
# script's global: section lists. A name listed but not exported (say, a wrapper compiled
# with hidden visibility and no HAMI_EXPORT declaration: the linker then drops it without a
# word) and a name exported but not listed are both named.
foreach(_v LIB MAP NM)
  if(NOT DEFINED ${_v})
    message(FATAL_ERROR "check_exports.cmake: -D${_v}=... is required")
  endif()
endforeach()
file(READ ${MAP} _map)
if(NOT _map MATCHES "global:([^}]*)local:")
  message(FATAL_ERROR "${MAP}: no 'global: ... local:' section")
endif()
string(REGEX MATCHALL "[A-Za-z_][A-Za-z0-9_]*" _listed "${CMAKE_MATCH_1}")
execute_process(COMMAND ${NM} -D --defined-only ${LIB} OUTPUT_VARIABLE _nm
                RESULT_VARIABLE _rc ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${LIB} failed: ${_err}")
endif()
string(REGEX MATCHALL "[0-9a-f]+ [A-Za-z] [A-Za-z_][A-Za-z0-9_@.]*" _rows "${_nm}")
set(_exported "")
foreach(_row ${_rows})
  string(REGEX REPLACE "^[0-9a-f]+ [A-Za-z] ([A-Za-z_][A-Za-z0-9_]*).*" "\\1" _name "${_row}")
  list(APPEND _exported ${_name})
endforeach()
set(_missing ${_listed})
list(REMOVE_ITEM _missing ${_exported})
set(_extra ${_exported})
list(REMOVE_ITEM _extra ${_listed})
if(_missing OR _extra)
  message(FATAL_ERROR "${LIB}: listed in ${MAP} but not exported: [${_missing}]; "
                      "exported but not listed: [${_extra}]")
endif()
list(LENGTH _listed _n)
message(STATUS "${LIB}: exactly the ${_n} names of ${MAP} are exported")
