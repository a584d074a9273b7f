# NCCL for the StepFun EP layer (src/stepfun/ep/, include/cakemoe/stepfun_ep.h).
#
# CAKEMOE_WITH_NCCL=AUTO (default) builds the EP layer when CUDA is on and NCCL is found, ON
# requires it, OFF leaves it out; without it stepfun::ep::prepare throws Unsupported naming why.
# NCCL is looked up in CAKEMOE_NCCL_DIR alone when that is set (a prefix with include/nccl.h and
# lib/libnccl.so or lib/libnccl.so.2, e.g. <site-packages>/nvidia/nccl of the nvidia-nccl-cu13
# wheel that torch brings), else in the CUDA toolkit, the system folders and, last, the
# nvidia.nccl wheel of the python3 on PATH.
set(CAKEMOE_WITH_NCCL "AUTO" CACHE STRING
    "StepFun EP layer over NCCL (needs CUDA): AUTO builds it when NCCL is found")
set_property(CACHE CAKEMOE_WITH_NCCL PROPERTY STRINGS AUTO ON OFF)
if(NOT CAKEMOE_WITH_NCCL MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "CAKEMOE_WITH_NCCL must be AUTO, ON or OFF, not '${CAKEMOE_WITH_NCCL}'")
endif()
set(CAKEMOE_NCCL_DIR "" CACHE PATH "Prefix holding include/nccl.h and lib/libnccl.so[.2]")

# Sets CAKEMOE_NCCL_INCLUDE_DIR / CAKEMOE_NCCL_LIBRARY (cache) when found.
function(_cakemoe_search_nccl)
  if(CAKEMOE_NCCL_DIR)
    find_path(CAKEMOE_NCCL_INCLUDE_DIR nccl.h PATHS "${CAKEMOE_NCCL_DIR}/include" NO_DEFAULT_PATH)
    find_library(CAKEMOE_NCCL_LIBRARY NAMES nccl libnccl.so.2
                 PATHS "${CAKEMOE_NCCL_DIR}/lib" "${CAKEMOE_NCCL_DIR}/lib64" NO_DEFAULT_PATH)
    return()
  endif()
  set(_wheel "")
  find_program(_cakemoe_python3 python3)
  if(_cakemoe_python3)
    execute_process(
      COMMAND "${_cakemoe_python3}" -c "import nvidia.nccl as m; print(list(m.__path__)[0])"
      OUTPUT_VARIABLE _wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
  get_filename_component(_toolkit "${CUDAToolkit_BIN_DIR}" DIRECTORY)
  find_path(CAKEMOE_NCCL_INCLUDE_DIR nccl.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} "${_toolkit}/include"
            PATHS /usr/include /usr/local/include "${_wheel}/include")
  find_library(CAKEMOE_NCCL_LIBRARY NAMES nccl libnccl.so.2
               HINTS "${_toolkit}/lib" "${_toolkit}/lib64" ${CUDAToolkit_LIBRARY_DIR}
               PATHS /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/lib "${_wheel}/lib")
endfunction()

# Adds the EP layer's device unit and NCCL to `target` when NCCL is enabled and found; sets
# CAKEMOE_NCCL_ENABLED in the caller's scope and defines the build-only target cakemoe_nccl.
function(cakemoe_add_nccl target)
  set(CAKEMOE_NCCL_ENABLED OFF PARENT_SCOPE)
  if(CAKEMOE_WITH_NCCL STREQUAL "OFF")
    message(STATUS "cakemoe: StepFun EP layer off (CAKEMOE_WITH_NCCL=OFF)")
    return()
  endif()
  if(NOT CAKEMOE_WITH_CUDA)
    if(CAKEMOE_WITH_NCCL STREQUAL "ON")
      message(FATAL_ERROR "CAKEMOE_WITH_NCCL=ON needs CAKEMOE_WITH_CUDA=ON")
    endif()
    return()
  endif()
  _cakemoe_search_nccl()
  if(NOT CAKEMOE_NCCL_INCLUDE_DIR OR NOT CAKEMOE_NCCL_LIBRARY)
    set(_why "no nccl.h / libnccl found (CAKEMOE_NCCL_DIR='${CAKEMOE_NCCL_DIR}')")
    if(CAKEMOE_WITH_NCCL STREQUAL "ON")
      message(FATAL_ERROR "cakemoe: CAKEMOE_WITH_NCCL=ON but ${_why}")
    endif()
    message(STATUS "cakemoe: StepFun EP layer off: ${_why}")
    return()
  endif()
  file(STRINGS "${CAKEMOE_NCCL_INCLUDE_DIR}/nccl.h" _version
       REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE "[^0-9;]" "" _version "${_version}")
  string(REPLACE ";" "." _version "${_version}")

  add_library(cakemoe_nccl INTERFACE)
  target_include_directories(cakemoe_nccl SYSTEM INTERFACE "${CAKEMOE_NCCL_INCLUDE_DIR}")
  target_link_libraries(cakemoe_nccl INTERFACE "${CAKEMOE_NCCL_LIBRARY}")
  # NOTE: the static library carries NCCL to its consumers: cakemoe_nccl in the build tree, the
  # library path itself in the installed export.
  target_link_libraries(${target} PRIVATE $<BUILD_INTERFACE:cakemoe_nccl>
                        INTERFACE $<INSTALL_INTERFACE:${CAKEMOE_NCCL_LIBRARY}>)
  target_compile_definitions(${target} PUBLIC CAKEMOE_WITH_NCCL=1)
  set(_unit "${PROJECT_SOURCE_DIR}/src/stepfun/ep/ep_kernels.cu")
  set_source_files_properties("${_unit}" PROPERTIES COMPILE_OPTIONS
                              "${CAKEMOE_GENCODE_PORTABLE};${CAKEMOE_GENCODE_PTX}")
  target_sources(${target} PRIVATE "${_unit}")
  set(CAKEMOE_NCCL_ENABLED ON PARENT_SCOPE)
  message(STATUS "cakemoe: StepFun EP layer on, NCCL ${_version} "
                 "(${CAKEMOE_NCCL_INCLUDE_DIR}, ${CAKEMOE_NCCL_LIBRARY})")
endfunction()
