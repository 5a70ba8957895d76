# Teach CMake 3.25 how to compile CUDA sources as C++20.
#
# CMake < 3.26 has no C++20 table for nvcc, so a target with .cu sources that asks for C++20 (directly
# or through kiln::kiln's cxx_std_20) gets no -std=c++20 (CMake 3.25.1 says nothing) and nvcc compiles
# it in its default dialect, where kiln's headers fail. Include this file right after
# enable_language(CUDA) (or project(... CUDA)), in the directory scope that creates the CUDA targets (or
# above it). kiln includes it itself and, added with add_subdirectory(), sets its variables in the
# calling directory too; kilnConfig.cmake includes it when CUDA is enabled before find_package(kiln). A
# project that enables CUDA after find_package(kiln) includes it itself (installed next to
# kilnConfig.cmake):
#   include(${kiln_DIR}/KilnCudaCxx20.cmake)
# It is a no-op when CMake already knows cuda_std_20 (3.26+) and when CUDA is not enabled.
if(CMAKE_CUDA_COMPILER_LOADED
   AND CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA"
   AND NOT "cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
  set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
endif()
