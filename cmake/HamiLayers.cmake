# Layers the build enforces (docs/build.md, "Layers"). Every library and program defined
# under src/ carries a layer: the folder says it with `set(HAMI_LAYER <layer>)` at the top of
# its CMakeLists.txt, a target may override it with `LAYER <layer>`. After every folder is
# added, hami_check_layers() reads each target's direct dependencies and stops the configure
# step at the first wrong arrow, listing all of them:
#
#   base       common, log, the vendor ABI headers (nvml, cudaapi): depend on base only
#   contract   node paths, limits, device config, Kubernetes API and HAMi's annotations, node
#              lock, device inventory: base and contract
#   core       region, broker: mechanisms several components run; base, contract and core
#   component  libvgpu, plugin, scheduler, monitor: base, contract, core, and the component's
#              own libraries (its folder), never a sibling component
#   sim        the simulated GPU and cluster: base and contract (pinned by outside oracles),
#              never a product component or core library, whose behaviour it checks
#   support    test-support libraries and stand-ins that drive the product in tests: anything
#   tool       programs (hami, hami-sim, the daemons' mains' own folder excepted): anything
set(HAMI_LAYERS base contract core component sim support tool)
set(HAMI_LAYER_DEPS_base base)
set(HAMI_LAYER_DEPS_contract base contract)
set(HAMI_LAYER_DEPS_core base contract core)
set(HAMI_LAYER_DEPS_component base contract core component)
set(HAMI_LAYER_DEPS_sim base contract sim)
set(HAMI_LAYER_DEPS_support ${HAMI_LAYERS})
set(HAMI_LAYER_DEPS_tool ${HAMI_LAYERS})

# hami_set_layer(target layer-or-empty): records the target's layer (the LAYER argument, else
# the folder's HAMI_LAYER) and its unit (the first folder under src/: "plugin", "sim").
# Targets outside src/ (tests, benchmarks, the demo) carry none and are not checked.
function(hami_set_layer target layer)
  if(NOT layer)
    set(layer "${HAMI_LAYER}")
  endif()
  file(RELATIVE_PATH _rel ${CMAKE_SOURCE_DIR}/src ${CMAKE_CURRENT_SOURCE_DIR})
  if(_rel MATCHES "^\\.\\.")
    if(NOT layer)
      return()
    endif()
    set(_unit "${_rel}")
  else()
    string(REGEX REPLACE "/.*" "" _unit "${_rel}")
    if(NOT layer)
      string(REPLACE ";" ", " _known "${HAMI_LAYERS}")
      message(FATAL_ERROR "${target} (src/${_rel}): no layer; put set(HAMI_LAYER <layer>) at "
                          "the top of src/${_rel}/CMakeLists.txt (one of ${_known}; "
                          "cmake/HamiLayers.cmake says which is which)")
    endif()
  endif()
  if(NOT layer IN_LIST HAMI_LAYERS)
    message(FATAL_ERROR "${target}: layer '${layer}' is not one of ${HAMI_LAYERS}")
  endif()
  set_target_properties(${target} PROPERTIES HAMI_LAYER ${layer} HAMI_UNIT "${_unit}")
  set_property(GLOBAL APPEND PROPERTY HAMI_LAYERED_TARGETS ${target})
endfunction()

# The rule for one arrow; sets `out` to "" when it is allowed, else to why not.
function(_hami_layer_verdict out layer unit dep_layer dep_unit)
  set(_why "")
  if(NOT dep_layer IN_LIST HAMI_LAYER_DEPS_${layer})
    string(REPLACE ";" ", " _allowed "${HAMI_LAYER_DEPS_${layer}}")
    set(_why "a ${layer} library may depend on ${_allowed} only")
  elseif(layer STREQUAL "component" AND dep_layer STREQUAL "component" AND
         NOT unit STREQUAL dep_unit)
    set(_why "a component uses contracts and core libraries, never another component")
  endif()
  set(${out} "${_why}" PARENT_SCOPE)
endfunction()

# Checks every arrow; one FATAL_ERROR lists every wrong one.
function(hami_check_layers)
  get_property(_targets GLOBAL PROPERTY HAMI_LAYERED_TARGETS)
  set(_wrong "")
  foreach(_t ${_targets})
    get_target_property(_layer ${_t} HAMI_LAYER)
    get_target_property(_unit ${_t} HAMI_UNIT)
    get_target_property(_type ${_t} TYPE)
    if(_type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(_deps ${_t} INTERFACE_LINK_LIBRARIES)
    else()
      get_target_property(_deps ${_t} LINK_LIBRARIES)
    endif()
    if(NOT _deps)
      continue()
    endif()
    foreach(_d ${_deps})
      if(NOT TARGET ${_d})
        continue()
      endif()
      get_target_property(_real ${_d} ALIASED_TARGET)
      if(_real)
        set(_d ${_real})
      endif()
      get_target_property(_dep_layer ${_d} HAMI_LAYER)
      if(NOT _dep_layer)
        continue()
      endif()
      get_target_property(_dep_unit ${_d} HAMI_UNIT)
      _hami_layer_verdict(_why ${_layer} "${_unit}" ${_dep_layer} "${_dep_unit}")
      if(_why)
        string(APPEND _wrong "\n  ${_t} (${_layer} ${_unit}) -> ${_d} (${_dep_layer} "
                             "${_dep_unit}): ${_why}")
      endif()
    endforeach()
  endforeach()
  if(_wrong)
    message(FATAL_ERROR "layering: dependencies that point the wrong way (docs/build.md, "
                        "Layers):${_wrong}")
  endif()
endfunction()
