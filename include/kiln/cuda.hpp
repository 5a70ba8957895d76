/// kiln's CUDA umbrella (nvcc only): everything in <kiln/kiln.hpp> plus the GPU executor and kernels.
#pragma once
#include "kiln/core/config.hpp"
#if !KILN_CUDA_COMPILER
#error "include kiln/cuda.hpp from a CUDA source (a .cu file, or LANGUAGE CUDA); host-only files include kiln/kiln.hpp"
#endif
#if !KILN_WITH_CUDA
#error "kiln/cuda.hpp needs the CUDA runtime: link your target to kiln::cuda (it defines KILN_WITH_CUDA=1), or pass -DKILN_WITH_CUDA=1 and link cudart, cublas and cublasLt"
#endif

#include "kiln/kiln.hpp"

#include "kiln/backend/cuda/check.hpp"
#include "kiln/backend/cuda/cublas.hpp"
#include "kiln/backend/cuda/device.hpp"
#include "kiln/backend/cuda/graph.hpp"
#include "kiln/backend/cuda/memory.hpp"

#include "kiln/backend/cuda/launch.cuh"
#include "kiln/backend/cuda/kernels/elementwise.cuh"
#include "kiln/backend/cuda/kernels/reduce.cuh"
#include "kiln/backend/cuda/executor.cuh"
