# Target helpers. Every library is one folder under src/ with one job; tests and fuzz
# targets sit beside the code they test.
include(CMakeParseArguments)
include(GoogleTest)

# hami_cc_library(NAME n [SRCS ...] [DEPS ...] [NO_EXCEPTIONS])
# A static, position-independent library (an INTERFACE library when SRCS is empty).
# Includes are rooted at src/ ("common/result.h").
function(hami_cc_library)
  cmake_parse_arguments(A "NO_EXCEPTIONS" "NAME" "SRCS;DEPS" ${ARGN})
  if(A_SRCS)
    add_library(${A_NAME} STATIC ${A_SRCS})
    target_include_directories(${A_NAME} PUBLIC ${CMAKE_SOURCE_DIR}/src)
    target_compile_options(${A_NAME} PRIVATE ${HAMI_WARNINGS})
    target_link_libraries(${A_NAME} PUBLIC ${A_DEPS})
    if(A_NO_EXCEPTIONS)
      target_compile_options(${A_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fno-exceptions>)
    endif()
  else()
    add_library(${A_NAME} INTERFACE)
    target_include_directories(${A_NAME} INTERFACE ${CMAKE_SOURCE_DIR}/src)
    target_link_libraries(${A_NAME} INTERFACE ${A_DEPS})
  endif()
endfunction()

# hami_cc_binary(NAME n SRCS ... [DEPS ...] [OUTPUT_NAME name])
function(hami_cc_binary)
  cmake_parse_arguments(A "" "NAME;OUTPUT_NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  target_compile_options(${A_NAME} PRIVATE ${HAMI_WARNINGS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
  if(A_OUTPUT_NAME)
    set_target_properties(${A_NAME} PROPERTIES OUTPUT_NAME ${A_OUTPUT_NAME})
  endif()
endfunction()

# hami_cc_test(NAME n SRCS ... [DEPS ...] LABELS unit|integration|sim|gpu|cluster
#              [ENV K=V ...] [TIMEOUT seconds] [RUN_SERIAL])
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

function(hami_cc_test)
  cmake_parse_arguments(A "RUN_SERIAL;CONCURRENT" "NAME;TIMEOUT" "SRCS;DEPS;LABELS;ENV" ${ARGN})
  list(LENGTH A_LABELS _n)
  if(NOT _n EQUAL 1 OR NOT A_LABELS MATCHES "^(unit|integration|sim|gpu|cluster)$")
    message(FATAL_ERROR "hami_cc_test(${A_NAME}): LABELS must be one of unit, integration, "
                        "sim, gpu, cluster")
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 120)
  endif()
  add_executable(${A_NAME} ${A_SRCS})
  target_compile_options(${A_NAME} PRIVATE ${HAMI_WARNINGS})
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
# With the fuzz preset: a libFuzzer binary. Otherwise: the same LLVMFuzzerTestOneInput
# linked with a replay main, run by CTest over every file of the corpus (label unit).
function(hami_fuzz_target)
  cmake_parse_arguments(A "" "NAME;CORPUS" "SRCS;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  target_compile_options(${A_NAME} PRIVATE ${HAMI_WARNINGS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
  set_target_properties(${A_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${HAMI_TEST_BIN_DIR})
  if(HAMI_SANITIZE STREQUAL "fuzzer")
    target_link_options(${A_NAME} PRIVATE -fsanitize=fuzzer)
  else()
    target_link_libraries(${A_NAME} PRIVATE hami_fuzz_replay)
  endif()
  add_test(NAME ${A_NAME}.corpus COMMAND ${A_NAME} ${A_CORPUS})
  set_tests_properties(${A_NAME}.corpus PROPERTIES LABELS unit TIMEOUT 120)
endfunction()

# hami_sim_library(NAME n SONAME libx.so.1 SRCS ... DEPS ... VERSION_SCRIPT file)
# A stand-in for a vendor library: built into build/lib/sim under its real file name,
# exporting exactly the names the version script lists.
function(hami_sim_library)
  cmake_parse_arguments(A "" "NAME;FILE_NAME;VERSION_SCRIPT" "SRCS;DEPS" ${ARGN})
  add_library(${A_NAME} SHARED ${A_SRCS})
  target_compile_options(${A_NAME} PRIVATE ${HAMI_WARNINGS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
  string(REGEX REPLACE "^lib(.*)\\.so\\.[0-9]+$" "\\1" _out "${A_FILE_NAME}")
  string(REGEX REPLACE "^lib.*(\\.so\\.[0-9]+)$" "\\1" _suffix "${A_FILE_NAME}")
  set_target_properties(${A_NAME} PROPERTIES
    OUTPUT_NAME ${_out} SUFFIX ${_suffix}
    LIBRARY_OUTPUT_DIRECTORY ${HAMI_SIM_LIB_DIR}
    LINK_DEPENDS ${A_VERSION_SCRIPT})
  # -Bsymbolic-functions: the library's calls to its own exports stay inside it, as in the
  # vendor's library, so an interposer preloaded in front of it sees only the program's calls.
  target_link_options(${A_NAME} PRIVATE
    -Wl,--version-script=${A_VERSION_SCRIPT} -Wl,-soname,${A_FILE_NAME}
    -Wl,-Bsymbolic-functions)
  if(NOT HAMI_SANITIZE)  # sanitizer runtimes resolve in the executable, not here
    target_link_options(${A_NAME} PRIVATE -Wl,-z,defs)
  endif()
endfunction()
