# Use ccache when it is installed: torch headers make every translation unit expensive.
find_program(XLAUNCH_CCACHE ccache)
if(XLAUNCH_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${XLAUNCH_CCACHE})
  set(CMAKE_C_COMPILER_LAUNCHER ${XLAUNCH_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${XLAUNCH_CCACHE})
endif()
