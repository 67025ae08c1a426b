# Target helpers. Every library is one folder under src/ with one job; tests and fuzz
# targets sit beside the code they test. Every target of src/ is defined through these.
include(CMakeParseArguments)
include(GoogleTest)
include(${CMAKE_CURRENT_LIST_DIR}/HamiLayers.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/HamiPaths.cmake)

# Each library is also reachable as hami::<name without the hami_ prefix> (hami_common is
# hami::common). DEPS name the aliases: a misspelt alias fails at configure time, where a
# misspelt plain name would silently become a linker flag (-lhami_comon).
function(hami_add_alias name)
  string(REGEX REPLACE "^hami_" "" _short "${name}")
  add_library(hami::${_short} ALIAS ${name})
endfunction()

# The compile settings every helper shares:
#   NO_EXCEPTIONS / NO_RTTI: -fno-exceptions / -fno-rtti (libvgpu.so and what it links);
#   HIDDEN: -fvisibility=hidden -fvisibility-inlines-hidden (the interposer's objects; only
#     what is marked HAMI_EXPORT, vgpu/export.h, keeps default visibility);
#   NO_WARNINGS: generated code (protoc's and grpc_cpp_plugin's output), built without the
#     project's warnings (HAMI_WARNINGS, cmake/HamiWarnings.cmake).
# Other arguments are ignored, so a helper passes its whole argument list.
function(hami_target_options target scope)
  cmake_parse_arguments(O "NO_EXCEPTIONS;NO_RTTI;HIDDEN;NO_WARNINGS" "" "" ${ARGN})
  if(NOT O_NO_WARNINGS)
    target_compile_options(${target} ${scope} ${HAMI_WARNINGS})
  endif()
  if(O_NO_EXCEPTIONS)
    target_compile_options(${target} ${scope} $<$<COMPILE_LANGUAGE:CXX>:-fno-exceptions>)
  endif()
  if(O_NO_RTTI)
    target_compile_options(${target} ${scope} $<$<COMPILE_LANGUAGE:CXX>:-fno-rtti>)
  endif()
  if(O_HIDDEN)
    set_target_properties(${target} PROPERTIES C_VISIBILITY_PRESET hidden
      CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  endif()
endfunction()
set(HAMI_TARGET_FLAGS NO_EXCEPTIONS NO_RTTI HIDDEN NO_WARNINGS)

# hami_cc_library(NAME n [SRCS ...] [DEPS ...] [NO_EXCEPTIONS] [NO_RTTI] [HIDDEN]
#                 [NO_WARNINGS])
# A static, position-independent library (an INTERFACE library when SRCS is empty), with
# its alias hami::n. Includes are rooted at src/ ("common/result.h"); DEPS are public.
function(hami_cc_library)
  cmake_parse_arguments(A "${HAMI_TARGET_FLAGS}" "NAME;LAYER" "SRCS;DEPS" ${ARGN})
  if(A_SRCS)
    add_library(${A_NAME} STATIC ${A_SRCS})
    target_include_directories(${A_NAME} PUBLIC ${CMAKE_SOURCE_DIR}/src)
    target_link_libraries(${A_NAME} PUBLIC ${A_DEPS})
    hami_target_options(${A_NAME} PRIVATE ${ARGN})
  else()
    add_library(${A_NAME} INTERFACE)
    target_include_directories(${A_NAME} INTERFACE ${CMAKE_SOURCE_DIR}/src)
    target_link_libraries(${A_NAME} INTERFACE ${A_DEPS})
  endif()
  hami_set_layer(${A_NAME} "${A_LAYER}")
  hami_add_alias(${A_NAME})
endfunction()

# hami_cc_shared_library(NAME n SRCS ... [DEPS ...] [OUTPUT_NAME name] [SUFFIX .so.1]
#                        [OUTPUT_DIRECTORY dir] [VERSION_SCRIPT file] [MODULE] [NO_UNDEFINED]
#                        [NO_EXCEPTIONS] [NO_RTTI] [HIDDEN])
# A shared library (MODULE: one only ever dlopen'ed), alias hami::n. DEPS are private. VERSION_SCRIPT: the
# linker's export list (a relink when it changes). NO_UNDEFINED: -Wl,-z,defs, except under a
# sanitizer, whose runtime resolves in the executable.
function(hami_cc_shared_library)
  cmake_parse_arguments(A "${HAMI_TARGET_FLAGS};MODULE;NO_UNDEFINED"
    "NAME;LAYER;OUTPUT_NAME;SUFFIX;OUTPUT_DIRECTORY;VERSION_SCRIPT" "SRCS;DEPS" ${ARGN})
  if(A_MODULE)
    add_library(${A_NAME} MODULE ${A_SRCS})
  else()
    add_library(${A_NAME} SHARED ${A_SRCS})
  endif()
  target_include_directories(${A_NAME} PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
  hami_target_options(${A_NAME} PRIVATE ${ARGN})
  if(A_OUTPUT_NAME)
    set_target_properties(${A_NAME} PROPERTIES OUTPUT_NAME ${A_OUTPUT_NAME})
  endif()
  if(A_SUFFIX)
    set_target_properties(${A_NAME} PROPERTIES SUFFIX ${A_SUFFIX})
  endif()
  if(A_OUTPUT_DIRECTORY)
    set_target_properties(${A_NAME} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${A_OUTPUT_DIRECTORY})
  endif()
  if(A_VERSION_SCRIPT)
    target_link_options(${A_NAME} PRIVATE -Wl,--version-script=${A_VERSION_SCRIPT})
    set_property(TARGET ${A_NAME} APPEND PROPERTY LINK_DEPENDS ${A_VERSION_SCRIPT})
  endif()
  if(A_NO_UNDEFINED AND NOT HAMI_SANITIZE)
    target_link_options(${A_NAME} PRIVATE -Wl,-z,defs)
  endif()
  hami_set_layer(${A_NAME} "${A_LAYER}")
  hami_add_alias(${A_NAME})
endfunction()

# hami_cc_binary(NAME n SRCS ... [DEPS ...] [OUTPUT_NAME name] [OUTPUT_DIRECTORY dir]
#                [NO_EXCEPTIONS] [NO_RTTI])
# OUTPUT_DIRECTORY: instead of build/bin (e.g. ${HAMI_TEST_BIN_DIR} for a program only
# tests run).
function(hami_cc_binary)
  cmake_parse_arguments(A "${HAMI_TARGET_FLAGS}" "NAME;LAYER;OUTPUT_NAME;OUTPUT_DIRECTORY"
    "SRCS;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  hami_set_layer(${A_NAME} "${A_LAYER}")
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
  hami_target_options(${A_NAME} PRIVATE ${ARGN})
  if(A_OUTPUT_NAME)
    set_target_properties(${A_NAME} PROPERTIES OUTPUT_NAME ${A_OUTPUT_NAME})
  endif()
  if(A_OUTPUT_DIRECTORY)
    set_target_properties(${A_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${A_OUTPUT_DIRECTORY})
  endif()
endfunction()

# hami_cc_test(NAME n SRCS ... [DEPS ...] LABELS unit|integration|sim|gpu|cluster
#              [ENV K=V ...] [TIMEOUT seconds] [RUN_SERIAL] [CONCURRENT])
# A GoogleTest binary under build/tests; each test case becomes one CTest test carrying
# the label, so `ctest -L unit` or `-LE gpu` select them. One label per test: unit (no
# processes or files beyond temp files), integration (several processes, real files and
# locks), sim (runs on the simulated GPU), gpu (needs a real GPU), cluster (a whole simulated
# cluster, `hami sim cluster up`; root).
# Tests of the concurrent parts (CONCURRENT): built together by the `concurrency_tests`
# target, for a ThreadSanitizer build of just them.
function(hami_concurrent_test name)
  set_property(GLOBAL APPEND PROPERTY HAMI_CONCURRENT_TESTS ${name})
endfunction()

# hami_concurrent_ctest_dir(dir): writes dir/CTestTestfile.cmake, which includes the CTest
# files gtest discovery made for the CONCURRENT tests and nothing else, so
# `ctest --test-dir dir` runs exactly their test cases, each with its own label, timeout and
# environment. (A second label cannot select them: gtest discovery's PROPERTIES list cannot
# carry a list-valued LABELS.) Call once, after every folder is added.
function(hami_concurrent_ctest_dir dir)
  get_property(_names GLOBAL PROPERTY HAMI_CONCURRENT_TESTS)
  set(_content "# Generated by hami_concurrent_ctest_dir: the CONCURRENT tests only.\n")
  foreach(_name ${_names})
    get_target_property(_bin ${_name} BINARY_DIR)
    get_property(_files DIRECTORY ${_bin} PROPERTY TEST_INCLUDE_FILES)
    set(_found FALSE)
    foreach(_file ${_files})
      if(_file MATCHES "/${_name}\\[[0-9]+\\]_include\\.cmake$")
        string(APPEND _content "include(\"${_file}\")\n")
        set(_found TRUE)
      endif()
    endforeach()
    if(NOT _found)
      message(FATAL_ERROR "CONCURRENT test ${_name}: no gtest discovery file among the "
                          "TEST_INCLUDE_FILES of ${_bin}")
    endif()
  endforeach()
  file(CONFIGURE OUTPUT ${dir}/CTestTestfile.cmake CONTENT "${_content}")
endfunction()

function(hami_cc_test)
  cmake_parse_arguments(A "RUN_SERIAL;CONCURRENT;${HAMI_TARGET_FLAGS}" "NAME;TIMEOUT"
    "SRCS;DEPS;LABELS;ENV" ${ARGN})
  list(LENGTH A_LABELS _n)
  if(NOT _n EQUAL 1 OR NOT A_LABELS MATCHES "^(unit|integration|sim|gpu|cluster)$")
    message(FATAL_ERROR "hami_cc_test(${A_NAME}): LABELS must be one of unit, integration, "
                        "sim, gpu, cluster")
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 120)
  endif()
  if(NOT HAMI_BUILD_TESTS)
    # The target exists (the folder's later lines may configure it) but is never built.
    add_executable(${A_NAME} EXCLUDE_FROM_ALL ${A_SRCS})
    return()
  endif()
  add_executable(${A_NAME} ${A_SRCS})
  hami_target_options(${A_NAME} PRIVATE ${ARGN})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  set_target_properties(${A_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${HAMI_TEST_BIN_DIR})
  if(A_CONCURRENT)
    hami_concurrent_test(${A_NAME})
  endif()
  set(_props LABELS ${A_LABELS} TIMEOUT ${A_TIMEOUT})
  if(A_ENV)
    list(APPEND _props ENVIRONMENT "${A_ENV}")
  endif()
  if(A_RUN_SERIAL)
    list(APPEND _props RUN_SERIAL TRUE)
  endif()
  gtest_discover_tests(${A_NAME} DISCOVERY_MODE PRE_TEST
                       WORKING_DIRECTORY ${CMAKE_BINARY_DIR}
                       PROPERTIES ${_props})
endfunction()

# hami_fuzz_target(NAME n SRCS ... [DEPS ...] CORPUS dir)
# Its sources see the entry point's declaration (cmake/fuzz_entry.h, included first).
# With the fuzz preset: a libFuzzer binary. Otherwise: the same LLVMFuzzerTestOneInput
# linked with a replay main, run by CTest over every file of the corpus (label unit).
function(hami_fuzz_target)
  cmake_parse_arguments(A "${HAMI_TARGET_FLAGS}" "NAME;CORPUS" "SRCS;DEPS" ${ARGN})
  if(NOT HAMI_BUILD_TESTS)
    add_executable(${A_NAME} EXCLUDE_FROM_ALL ${A_SRCS})
    return()
  endif()
  add_executable(${A_NAME} ${A_SRCS})
  hami_target_options(${A_NAME} PRIVATE ${ARGN})
  target_compile_options(${A_NAME} PRIVATE -include ${CMAKE_SOURCE_DIR}/cmake/fuzz_entry.h)
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
  set_target_properties(${A_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${HAMI_TEST_BIN_DIR})
  if(HAMI_SANITIZE STREQUAL "fuzzer")
    target_link_options(${A_NAME} PRIVATE -fsanitize=fuzzer)
  else()
    target_link_libraries(${A_NAME} PRIVATE hami::fuzz_replay)
  endif()
  add_test(NAME ${A_NAME}.corpus COMMAND ${A_NAME} ${A_CORPUS})
  set_tests_properties(${A_NAME}.corpus PROPERTIES LABELS unit TIMEOUT 120)
endfunction()

# hami_sim_library(NAME n FILE_NAME libx.so.1 SRCS ... DEPS ... VERSION_SCRIPT file)
# A stand-in for a vendor library: built into build/lib/sim under its real file name,
# exporting exactly the names the version script lists.
function(hami_sim_library)
  cmake_parse_arguments(A "${HAMI_TARGET_FLAGS}" "NAME;LAYER;FILE_NAME;VERSION_SCRIPT"
    "SRCS;DEPS" ${ARGN})
  string(REGEX REPLACE "^lib(.*)\\.so\\.[0-9]+$" "\\1" _out "${A_FILE_NAME}")
  string(REGEX REPLACE "^lib.*(\\.so\\.[0-9]+)$" "\\1" _suffix "${A_FILE_NAME}")
  set(_opts "")
  foreach(_f ${HAMI_TARGET_FLAGS})
    if(A_${_f})
      list(APPEND _opts ${_f})
    endif()
  endforeach()
  hami_cc_shared_library(NAME ${A_NAME} SRCS ${A_SRCS} DEPS ${A_DEPS} ${_opts}
    VERSION_SCRIPT ${A_VERSION_SCRIPT} OUTPUT_NAME ${_out} SUFFIX ${_suffix}
    OUTPUT_DIRECTORY ${HAMI_SIM_LIB_DIR} NO_UNDEFINED LAYER "${A_LAYER}")
  # -Bsymbolic-functions: the library's calls to its own exports stay inside it, as in the
  # vendor's library, so an interposer preloaded in front of it sees only the program's calls.
  target_link_options(${A_NAME} PRIVATE -Wl,-soname,${A_FILE_NAME} -Wl,-Bsymbolic-functions)
endfunction()

# hami_grpc_proto(NAME target PROTO file DESCRIPTION text)
# Compiles PROTO (a file under src/) with protoc and grpc_cpp_plugin into the build tree's
# gen/<its folder under src>/ and builds the generated code as the library NAME (alias
# hami::<NAME without hami_>): without the project's warnings, its headers included as system
# headers so that they add none to the code that uses them. Users include
# "<folder>/<name>.pb.h" and "<folder>/<name>.grpc.pb.h".
function(hami_grpc_proto)
  cmake_parse_arguments(P "" "NAME;PROTO;DESCRIPTION" "" ${ARGN})
  file(RELATIVE_PATH _rel ${PROJECT_SOURCE_DIR}/src ${P_PROTO})
  get_filename_component(_dir ${_rel} DIRECTORY)
  get_filename_component(_base ${_rel} NAME_WE)
  set(_gen_root ${CMAKE_BINARY_DIR}/gen)
  set(_gen ${_gen_root}/${_dir})
  add_custom_command(
    OUTPUT ${_gen}/${_base}.pb.cc ${_gen}/${_base}.pb.h ${_gen}/${_base}.grpc.pb.cc
           ${_gen}/${_base}.grpc.pb.h
    COMMAND ${CMAKE_COMMAND} -E make_directory ${_gen}
    COMMAND ${HAMI_PROTOC} -I ${PROJECT_SOURCE_DIR}/src
            --cpp_out=${_gen_root} --grpc_out=${_gen_root}
            --plugin=protoc-gen-grpc=${HAMI_GRPC_CPP_PLUGIN}
            ${P_PROTO}
    DEPENDS ${P_PROTO} ${HAMI_PROTOC} ${HAMI_GRPC_CPP_PLUGIN}
    COMMENT "protoc: ${_rel} (${P_DESCRIPTION})"
    VERBATIM)
  hami_cc_library(NAME ${P_NAME} NO_WARNINGS
    SRCS ${_gen}/${_base}.pb.cc ${_gen}/${_base}.grpc.pb.cc
    DEPS gRPC::grpc++ protobuf::libprotobuf)
  target_include_directories(${P_NAME} SYSTEM PUBLIC ${_gen_root})
endfunction()
