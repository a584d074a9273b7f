# Third-party dependencies for tests and benchmarks.
#
# Each one is looked up as an installed package first (Debian: libgtest-dev, libbenchmark-dev).
# When that fails, the copy that scripts/setup-deps.sh stages under third_party/ is used, so a
# machine with no network and no such packages (the H200 box) can still build everything once
# the caller carries third_party/ along.
set(CAKEMOE_THIRD_PARTY_DIR "${PROJECT_SOURCE_DIR}/third_party")

# GoogleTest: installed package, else the staged sources in third_party/googletest.
function(cakemoe_find_gtest)
  find_package(GTest QUIET)
  if(TARGET GTest::gtest AND TARGET GTest::gtest_main)
    message(STATUS "cakemoe: GoogleTest from ${GTest_DIR}")
    return()
  endif()
  set(_src "${CAKEMOE_THIRD_PARTY_DIR}/googletest")
  if(NOT EXISTS "${_src}/CMakeLists.txt")
    message(FATAL_ERROR "cakemoe: GoogleTest not found. Install libgtest-dev and libgmock-dev "
                        "(scripts/setup-deps.sh does), stage a copy in third_party/googletest "
                        "(scripts/setup-deps.sh does that too where /usr/src/googletest exists), "
                        "or configure with -DCAKEMOE_BUILD_TESTS=OFF.")
  endif()
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK ON CACHE BOOL "" FORCE)
  set(gtest_force_shared_crt ON CACHE BOOL "" FORCE)
  # NOTE: googletest 1.12 asks for CMake 3.5; newer CMake (4.x) needs this to accept that.
  set(CMAKE_POLICY_VERSION_MINIMUM 3.5)
  add_subdirectory("${_src}" "${CMAKE_BINARY_DIR}/_deps/googletest" EXCLUDE_FROM_ALL SYSTEM)
  message(STATUS "cakemoe: GoogleTest built from ${_src}")
endfunction()

# Google Benchmark: installed package, else the staged headers + shared library in
# third_party/benchmark/{include,lib}. Without either, benchmarks are skipped (not an error).
function(cakemoe_find_benchmark)
  find_package(benchmark QUIET)
  if(TARGET benchmark::benchmark)
    message(STATUS "cakemoe: Google Benchmark from ${benchmark_DIR}")
    return()
  endif()
  set(_root "${CAKEMOE_THIRD_PARTY_DIR}/benchmark")
  file(GLOB _libs "${_root}/lib/libbenchmark.so*")
  if(NOT EXISTS "${_root}/include/benchmark/benchmark.h" OR NOT _libs)
    message(STATUS "cakemoe: Google Benchmark not found; benchmarks are not built")
    return()
  endif()
  list(GET _libs 0 _lib)
  get_filename_component(_soname "${_lib}" NAME)
  add_library(benchmark::benchmark SHARED IMPORTED GLOBAL)
  set_target_properties(benchmark::benchmark PROPERTIES
      IMPORTED_LOCATION "${_lib}" IMPORTED_SONAME "${_soname}"
      INTERFACE_INCLUDE_DIRECTORIES "${_root}/include"
      INTERFACE_LINK_LIBRARIES Threads::Threads)
  message(STATUS "cakemoe: Google Benchmark from the staged copy ${_lib}")
endfunction()
