# Finds xlaunch's dependencies and decides what is enabled. Required: MPI, yaml-cpp, CLI11,
# nlohmann/json, LibTorch. Optional (AUTO|ON|OFF): CUDA toolkit, NCCL. GoogleTest when tests are built.

function(_xlaunch_check_tristate name)
  if(NOT ${name} MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${name}=${${name}} is not one of AUTO, ON, OFF")
  endif()
endfunction()
_xlaunch_check_tristate(XLAUNCH_WITH_CUDA)
_xlaunch_check_tristate(XLAUNCH_WITH_NCCL)

find_package(Threads REQUIRED)
find_package(MPI REQUIRED COMPONENTS C)
find_package(yaml-cpp REQUIRED)
find_package(CLI11 REQUIRED)
find_package(ZLIB REQUIRED)
# JSON (the status directory's trace parts, report.json, trace.json): private to the targets that
# write or read it, never in an installed header.
find_package(nlohmann_json 3 REQUIRED)

# CUDA toolkit: also needed by a CUDA build of LibTorch's own CMake package.
if(NOT XLAUNCH_WITH_CUDA STREQUAL "OFF")
  if(NOT DEFINED CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  if(NOT CMAKE_CUDA_COMPILER AND CUDAToolkit_ROOT AND EXISTS ${CUDAToolkit_ROOT}/bin/nvcc)
    set(CMAKE_CUDA_COMPILER ${CUDAToolkit_ROOT}/bin/nvcc)
  endif()
  find_package(CUDAToolkit)
endif()

# LibTorch: CMAKE_PREFIX_PATH / Torch_DIR win; otherwise ask python3's torch where its package is.
find_package(Torch QUIET)
if(NOT Torch_FOUND)
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    execute_process(COMMAND ${Python3_EXECUTABLE} -c "import torch; print(torch.utils.cmake_prefix_path)"
                    OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
  if(_torch_prefix)
    list(APPEND CMAKE_PREFIX_PATH ${_torch_prefix})
  endif()
  find_package(Torch)
endif()
if(NOT Torch_FOUND)
  message(FATAL_ERROR "LibTorch not found. Run scripts/install-deps.sh (installs PyPI's torch wheel), "
                      "or pass -DCMAKE_PREFIX_PATH=/path/to/libtorch.")
endif()
# TORCH_LIBRARIES carries the flags; keep the include dirs and ABI define on our targets.
set(XLAUNCH_TORCH_CUDA OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(XLAUNCH_TORCH_CUDA ON)
endif()

# CUDA for our own code: the kernels need nvcc; the runtime's device paths need a CUDA LibTorch.
set(XLAUNCH_CUDA_ENABLED OFF)
if(CUDAToolkit_FOUND AND NOT XLAUNCH_WITH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    set(XLAUNCH_CUDA_ENABLED ON)
  endif()
endif()
if(XLAUNCH_WITH_CUDA STREQUAL "ON" AND NOT XLAUNCH_CUDA_ENABLED)
  message(FATAL_ERROR "XLAUNCH_WITH_CUDA=ON but no CUDA toolkit with nvcc was found "
                      "(set CUDAToolkit_ROOT, or use -DXLAUNCH_WITH_CUDA=AUTO)")
endif()
set(XLAUNCH_DEVICE_PATHS OFF)   # runtime code that uses CUDA streams/events through LibTorch
if(XLAUNCH_CUDA_ENABLED AND XLAUNCH_TORCH_CUDA)
  set(XLAUNCH_DEVICE_PATHS ON)
endif()

# NCCL: header and library, hinted by NCCL_HOME, then the CUDA toolkit.
set(XLAUNCH_NCCL_ENABLED OFF)
if(NOT XLAUNCH_WITH_NCCL STREQUAL "OFF" AND XLAUNCH_DEVICE_PATHS)
  set(_nccl_hints ${NCCL_HOME} $ENV{NCCL_HOME} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_ROOT})
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY nccl HINTS ${_nccl_hints} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    file(STRINGS ${NCCL_INCLUDE_DIR}/nccl.h _nccl_ver REGEX "#define NCCL_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*NCCL_MINOR ([0-9]+).*NCCL_PATCH ([0-9]+).*" "\\1.\\2.\\3"
           NCCL_VERSION "${_nccl_ver}")
    add_library(xlaunch_nccl INTERFACE)
    target_include_directories(xlaunch_nccl INTERFACE ${NCCL_INCLUDE_DIR})
    target_link_libraries(xlaunch_nccl INTERFACE ${NCCL_LIBRARY})
    set(XLAUNCH_NCCL_ENABLED ON)
  endif()
endif()
if(XLAUNCH_WITH_NCCL STREQUAL "ON" AND NOT XLAUNCH_NCCL_ENABLED)
  message(FATAL_ERROR "XLAUNCH_WITH_NCCL=ON but NCCL (nccl.h, libnccl) was not found, or CUDA is off "
                      "(set NCCL_HOME, or use -DXLAUNCH_WITH_NCCL=AUTO)")
endif()

if(XLAUNCH_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

function(xlaunch_print_summary)
  message(STATUS "")
  message(STATUS "xlaunch ${PROJECT_VERSION} configuration summary")
  message(STATUS "  LibTorch        : ${Torch_VERSION} (${Torch_DIR}), CUDA build: ${XLAUNCH_TORCH_CUDA}")
  message(STATUS "  MPI             : ${MPI_C_VERSION} (${MPI_C_LIBRARIES})")
  message(STATUS "  yaml-cpp, CLI11 : found")
  message(STATUS "  nlohmann/json   : ${nlohmann_json_VERSION}")
  message(STATUS "  CUDA toolkit    : ${CUDAToolkit_VERSION} found=${CUDAToolkit_FOUND}  [XLAUNCH_WITH_CUDA=${XLAUNCH_WITH_CUDA}] -> kernels ${XLAUNCH_CUDA_ENABLED}, device paths ${XLAUNCH_DEVICE_PATHS}")
  message(STATUS "  NCCL            : ${NCCL_VERSION} ${NCCL_LIBRARY}  [XLAUNCH_WITH_NCCL=${XLAUNCH_WITH_NCCL}] -> ${XLAUNCH_NCCL_ENABLED}")
  message(STATUS "  tests/examples  : ${XLAUNCH_BUILD_TESTS}/${XLAUNCH_BUILD_EXAMPLES}")
  message(STATUS "")
endfunction()
