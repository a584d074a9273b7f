# CUDA kernel units and the CUTLASS/CuTe headers they may use.

# cakemoe_cutlass: interface target carrying the CUTLASS/CuTe include folders (as SYSTEM, so their
# warnings stay quiet) and CAKEMOE_HAVE_CUTE=1 when the headers are there. Without them the target
# is empty and code that needs CuTe must be guarded by CAKEMOE_HAVE_CUTE.
function(cakemoe_add_cutlass_target)
  add_library(cakemoe_cutlass INTERFACE)
  if(EXISTS "${CAKEMOE_CUTLASS_DIR}/include/cute/tensor.hpp")
    target_include_directories(cakemoe_cutlass SYSTEM INTERFACE
                               "${CAKEMOE_CUTLASS_DIR}/include"
                               "${CAKEMOE_CUTLASS_DIR}/tools/util/include")
    target_compile_definitions(cakemoe_cutlass INTERFACE CAKEMOE_HAVE_CUTE=1)
    message(STATUS "cakemoe: CUTLASS/CuTe headers from ${CAKEMOE_CUTLASS_DIR}")
  else()
    message(WARNING "cakemoe: no CUTLASS/CuTe headers at CAKEMOE_CUTLASS_DIR="
                    "${CAKEMOE_CUTLASS_DIR} (expected include/cute/tensor.hpp). Run "
                    "scripts/setup-deps.sh or point CAKEMOE_CUTLASS_DIR at a copy. Building on "
                    "without CAKEMOE_HAVE_CUTE.")
  endif()
endfunction()

# Kernel units: every src/**/inst/*.cu (and src/core/*.cu) is one catalog entry. The file name
# says its arch: `sm90_*` units are Hopper-only (sm_90a); all others are portable (sm_90a,
# sm_100a, sm_103a), and those matching CAKEMOE_PTX_UNITS_REGEX also carry compute_80 PTX for
# other devices (CAKEMOE_PORTABLE_PTX).
#
# CAKEMOE_KERNELS=ci leaves out the units matching CAKEMOE_CI_SKIPPED_UNITS_REGEX, which a CI
# without a GPU need not compile (its CPU tests never launch a kernel, and the header check still
# compiles every kernel header on its own): the Hopper-only units (`sm90_*`, the StepFun
# tensor-core GEMMs) and BGMV's specialized bodies (`bgmv_specialized_h*`: without them the
# planner takes the generic variant and their GPU tests skip). CAKEMOE_KERNELS=all builds every
# unit; scripts/test.sh picks it when a GPU is present, the GPU scripts always.
set(CAKEMOE_CI_SKIPPED_UNITS_REGEX "^(sm90_|bgmv_specialized_)")
function(cakemoe_add_kernel_units target)
  file(GLOB_RECURSE _units CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/src/*/inst/*.cu ${PROJECT_SOURCE_DIR}/src/core/*.cu)
  set(_built "")
  set(_catalog "")
  set(_ptx_catalog "")
  set(_skipped 0)
  foreach(_unit IN LISTS _units)
    get_filename_component(_name ${_unit} NAME_WE)
    if(CAKEMOE_KERNELS STREQUAL "ci" AND _name MATCHES "${CAKEMOE_CI_SKIPPED_UNITS_REGEX}")
      math(EXPR _skipped "${_skipped} + 1")
      continue()
    endif()
    if(_name MATCHES "^sm90_")
      set(_flags ${CAKEMOE_GENCODE_HOPPER})
    else()
      set(_flags ${CAKEMOE_GENCODE_PORTABLE})
      if(CAKEMOE_GENCODE_PTX AND _name MATCHES "${CAKEMOE_PTX_UNITS_REGEX}")
        list(APPEND _flags ${CAKEMOE_GENCODE_PTX})
        list(APPEND _ptx_catalog ${_name})
      endif()
    endif()
    set_source_files_properties(${_unit} PROPERTIES COMPILE_OPTIONS "${_flags}")
    target_sources(${target} PRIVATE ${_unit})
    list(APPEND _built ${_name})
    if(_unit MATCHES "/inst/")
      list(APPEND _catalog ${_name})
    endif()
  endforeach()
  # Build-only: headers, nothing to link, so the installed export does not name it.
  target_link_libraries(${target} PRIVATE $<BUILD_INTERFACE:cakemoe_cutlass>)
  # The catalog of compiled inst/ units (src/core/kernel_registry.cpp includes it): one line each,
  # rewritten only when the list changes so that nothing rebuilds needlessly.
  set(_list "")
  foreach(_name IN LISTS _catalog)
    string(APPEND _list "CAKEMOE_UNIT(${_name})\n")
  endforeach()
  set(_inc "${CMAKE_BINARY_DIR}/generated/cakemoe_generated/kernel_units.inc")
  file(CONFIGURE OUTPUT "${_inc}" CONTENT "${_list}" @ONLY)
  # The units that also carry compute_80 PTX (core::kernel_unit_has_ptx): devices without native
  # code run only these.
  set(_ptx_list "")
  foreach(_name IN LISTS _ptx_catalog)
    string(APPEND _ptx_list "CAKEMOE_PTX_UNIT(${_name})\n")
  endforeach()
  file(CONFIGURE OUTPUT "${CMAKE_BINARY_DIR}/generated/cakemoe_generated/kernel_units_ptx.inc"
       CONTENT "${_ptx_list}" @ONLY)
  target_include_directories(${target} PRIVATE "${CMAKE_BINARY_DIR}/generated")
  list(LENGTH _built _count)
  message(STATUS "cakemoe: ${_count} CUDA kernel units, ${_skipped} left out "
                 "(CAKEMOE_KERNELS=${CAKEMOE_KERNELS})")
endfunction()
