# Teach CMake 3.25 how to compile CUDA sources as C++20 (see TOOLCHAIN.md §2).
#
# CMake < 3.26 has no C++20 table for nvcc, so any target with .cu sources that (directly or through
# kiln::kiln's cxx_std_20) asks for C++20 fails at generate time with "requires the language dialect
# CUDA20 ... CMake does not know the flags to enable it". Include this file right after
# enable_language(CUDA), in the directory scope that creates the CUDA targets (or above it).
# It is a no-op when CMake already knows cuda_std_20 (3.26+) and when CUDA is not enabled.
if(CMAKE_CUDA_COMPILER_LOADED
   AND CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA"
   AND NOT "cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
  set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
endif()
