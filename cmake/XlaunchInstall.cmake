# `cmake --install`: the launcher, libxlaunch, its public headers and the CMake package `xlaunch`
# (find_package(xlaunch CONFIG) -> xlaunch::runtime, xlaunch::launcher). See docs/install.md.
#
# Included before the targets are defined, because the RPATH defaults below are read when a target
# is created; xlaunch_install_package() runs after them.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Installed binaries find LibTorch, MPI and CUDA where this build found them (LibTorch usually
# lives in a Python environment, outside the prefix) and libxlaunch in the prefix's lib directory.
if(NOT DEFINED CMAKE_INSTALL_RPATH_USE_LINK_PATH)
  set(CMAKE_INSTALL_RPATH_USE_LINK_PATH ON)
endif()
if(NOT DEFINED CMAKE_INSTALL_RPATH)
  set(CMAKE_INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
endif()

set(XLAUNCH_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/xlaunch CACHE STRING
    "Where the xlaunch CMake package is installed, relative to the prefix")

function(xlaunch_install_package)
  install(EXPORT xlaunchTargets NAMESPACE xlaunch:: DESTINATION ${XLAUNCH_INSTALL_CMAKEDIR})
  # What the package config needs to know about this build: the same dependencies, found the way
  # this build found them (cmake/XlaunchDeps.cmake), with this build's locations as last hints.
  set(XLAUNCH_BUILT_TORCH_VERSION ${Torch_VERSION})
  set(XLAUNCH_BUILT_TORCH_DIR ${Torch_DIR})
  set(XLAUNCH_BUILT_CUDA_ROOT "")
  if(CUDAToolkit_BIN_DIR)
    get_filename_component(XLAUNCH_BUILT_CUDA_ROOT ${CUDAToolkit_BIN_DIR} DIRECTORY)
  endif()
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/xlaunchConfig.cmake.in
    ${PROJECT_BINARY_DIR}/xlaunchConfig.cmake INSTALL_DESTINATION ${XLAUNCH_INSTALL_CMAKEDIR})
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/xlaunchConfigVersion.cmake
    VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/xlaunchConfig.cmake ${PROJECT_BINARY_DIR}/xlaunchConfigVersion.cmake
          DESTINATION ${XLAUNCH_INSTALL_CMAKEDIR})
endfunction()
