# Build options and the warning/sanitizer flags every kvtier target gets through kvtier_warnings.
option(KVTIER_BUILD_TESTS "Build unit, integration and benchmark executables" ON)
option(KVTIER_WERROR "Treat warnings as errors" OFF)
# option() cannot express AUTO, hence cache strings.
set(KVTIER_CUDA AUTO CACHE STRING "Build the CUDA kernels and executor: AUTO (when a CUDA compiler is found), ON, OFF")
set_property(CACHE KVTIER_CUDA PROPERTY STRINGS AUTO ON OFF)
set(KVTIER_SANITIZE "" CACHE STRING "Sanitizers: empty, 'address;undefined' or 'thread'")
option(KVTIER_FUZZ "Build the libFuzzer targets of tests/fuzz (clang only; adds address and undefined to KVTIER_SANITIZE)" OFF)

add_library(kvtier_warnings INTERFACE)
target_compile_options(kvtier_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX,C>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>
  $<$<AND:$<BOOL:${KVTIER_WERROR}>,$<COMPILE_LANGUAGE:CXX,C>>:-Werror>)

set(_kvtier_san_list ${KVTIER_SANITIZE})
if(KVTIER_FUZZ)
  # libFuzzer needs clang's coverage instrumentation in every library under test
  # (fuzzer-no-link); only the fuzz executables link libFuzzer itself (tests/fuzz).
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "KVTIER_FUZZ=ON needs clang (e.g. -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang; scripts/fuzz)")
  endif()
  if("thread" IN_LIST _kvtier_san_list)
    message(FATAL_ERROR "KVTIER_FUZZ=ON runs under address and undefined, which exclude KVTIER_SANITIZE=thread")
  endif()
  list(APPEND _kvtier_san_list address undefined)
  list(REMOVE_DUPLICATES _kvtier_san_list)
  add_compile_options(-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined)
endif()
if(_kvtier_san_list)
  list(JOIN _kvtier_san_list "," _kvtier_san)
  add_compile_options(-fsanitize=${_kvtier_san} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${_kvtier_san})
endif()

# Resolve KVTIER_CUDA to KVTIER_WITH_CUDA once; kernels/ is the only reader.
set(KVTIER_WITH_CUDA OFF)
if(NOT KVTIER_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)  # H200 (sm_90); override on the command line
    endif()
    enable_language(CUDA)
    set(KVTIER_WITH_CUDA ON)
  elseif(KVTIER_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KVTIER_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "kvtier: CUDA backend ${KVTIER_WITH_CUDA}")
