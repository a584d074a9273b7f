# Install rules: the C++ package and the CLI. `cmake --install <build> --prefix P` gives
#   P/include/cakemoe/*.h, P/lib/libcakemoe.a, P/bin/cakemoe, P/share/doc/cakemoe/LICENSE,
#   P/lib/cmake/cakemoe/cakemoe{Config,ConfigVersion,Targets}.cmake
# so that find_package(cakemoe CONFIG) with CMAKE_PREFIX_PATH=P yields cakemoe::cakemoe
# (examples/cpp is such a consumer; scripts/check-package.sh builds it against an install).
# NOTE: `pip install .` (scikit-build-core, SKBUILD set) installs only the Python package.
if(SKBUILD)
  return()
endif()
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(CAKEMOE_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/cakemoe")
install(TARGETS cakemoe EXPORT cakemoeTargets ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/cakemoe"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}" FILES_MATCHING PATTERN "*.h")
install(EXPORT cakemoeTargets NAMESPACE cakemoe:: DESTINATION "${CAKEMOE_INSTALL_CMAKEDIR}")
install(TARGETS cakemoe_cli RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
install(FILES "${PROJECT_SOURCE_DIR}/LICENSE" DESTINATION "${CMAKE_INSTALL_DOCDIR}")

# The toolkit root the config file suggests to FindCUDAToolkit (the one the library was built
# against); empty in a build without CUDA.
set(_cakemoe_cuda_root "")
if(CAKEMOE_WITH_CUDA)
  get_filename_component(_cakemoe_cuda_root "${CUDAToolkit_BIN_DIR}" DIRECTORY)
endif()
configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/cakemoeConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/cakemoeConfig.cmake"
  INSTALL_DESTINATION "${CAKEMOE_INSTALL_CMAKEDIR}")
# NOTE: before 1.0 a minor version may change the API, so only the same minor version matches.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/cakemoeConfigVersion.cmake"
                                 COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/cakemoeConfig.cmake"
              "${PROJECT_BINARY_DIR}/cakemoeConfigVersion.cmake"
        DESTINATION "${CAKEMOE_INSTALL_CMAKEDIR}")
