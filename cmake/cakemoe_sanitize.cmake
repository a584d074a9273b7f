# Host sanitizers (CAKEMOE_SANITIZE, e.g. "address,undefined") for CPU-only builds, g++ or clang.
# Every target of the tree gets them, so the CPU engine and the CPU tests run instrumented; any
# sanitizer report ends the process (-fno-sanitize-recover=all), so undefined behaviour fails the
# test that hit it. GPU code is checked with compute-sanitizer instead (scripts/gpu-check.sh).
function(cakemoe_apply_sanitizers)
  if(NOT CAKEMOE_SANITIZE)
    return()
  endif()
  if(CAKEMOE_WITH_CUDA)
    message(FATAL_ERROR "CAKEMOE_SANITIZE is for CPU-only builds: configure with "
                        "-DCAKEMOE_WITH_CUDA=OFF (device code is checked with compute-sanitizer)")
  endif()
  if(NOT CAKEMOE_SANITIZE MATCHES "^[a-z,]+$")
    message(FATAL_ERROR "CAKEMOE_SANITIZE must be a comma-separated list of sanitizer names "
                        "(e.g. address,undefined), not '${CAKEMOE_SANITIZE}'")
  endif()
  # NOTE: -g1 (line tables) gives reports file:line at little build cost; frame pointers make
  # ASan's fast unwinder reliable.
  add_compile_options(-fsanitize=${CAKEMOE_SANITIZE} -fno-sanitize-recover=all
                      -fno-omit-frame-pointer -g1)
  add_link_options(-fsanitize=${CAKEMOE_SANITIZE})
  # Lets tests drop wall-clock bounds that instrumented code cannot meet.
  add_compile_definitions(CAKEMOE_SANITIZED=1)
  message(STATUS "cakemoe: host sanitizers ${CAKEMOE_SANITIZE} (${CMAKE_CXX_COMPILER_ID})")
endfunction()
