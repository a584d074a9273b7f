# Kernel units: every src/**/inst/*.cu is one catalog entry. The file name says its arch:
# `sm90_*` units are Hopper-only (sm_90a); all others are portable (sm_90a, sm_100a, sm_103a).
# With CAKEMOE_KERNELS=ci only units whose name does not contain `_all_` are compiled, which keeps
# the 2-core CI build short; the GPU script builds with CAKEMOE_KERNELS=all.
function(cakemoe_add_kernel_units target)
  file(GLOB_RECURSE _units CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/src/*/inst/*.cu ${PROJECT_SOURCE_DIR}/src/core/*.cu)
  set(_built "")
  foreach(_unit IN LISTS _units)
    get_filename_component(_name ${_unit} NAME_WE)
    if(CAKEMOE_KERNELS STREQUAL "ci" AND _name MATCHES "_all_")
      continue()
    endif()
    if(_name MATCHES "^sm90_")
      set(_flags ${CAKEMOE_GENCODE_HOPPER})
    else()
      set(_flags ${CAKEMOE_GENCODE_PORTABLE})
    endif()
    set_source_files_properties(${_unit} PROPERTIES COMPILE_OPTIONS "${_flags}")
    target_sources(${target} PRIVATE ${_unit})
    list(APPEND _built ${_name})
  endforeach()
  if(EXISTS "${CAKEMOE_CUTLASS_DIR}/include/cute/tensor.hpp")
    target_include_directories(${target} SYSTEM PRIVATE ${CAKEMOE_CUTLASS_DIR}/include
                               ${CAKEMOE_CUTLASS_DIR}/tools/util/include)
    target_compile_definitions(${target} PRIVATE CAKEMOE_HAVE_CUTE=1)
  endif()
  list(LENGTH _built _count)
  message(STATUS "cakemoe: ${_count} CUDA kernel units (CAKEMOE_KERNELS=${CAKEMOE_KERNELS})")
endfunction()
