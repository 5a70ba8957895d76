/// kiln's host umbrella: tensors, fused expressions, reductions, GEMM, devices. CUDA sources include
/// <kiln/cuda.hpp> instead, which adds the GPU executor.
#pragma once
#include "kiln/backend/cpu/blas_kernels.hpp"  // blas_description(), better_blas_coretype()
#include "kiln/backend/cpu/threads.hpp"       // threads(), ScopedThreads
#include "kiln/core/config.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/core/half.hpp"
#include "kiln/core/index.hpp"
#include "kiln/core/type_list.hpp"
#include "kiln/core/warning.hpp"
#include "kiln/expr/assign.hpp"
#include "kiln/expr/reduce.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/ops/functors.hpp"
#include "kiln/ops/joins.hpp"
#include "kiln/ops/layout.hpp"
#include "kiln/ops/matmul.hpp"
#include "kiln/ops/reductions.hpp"
#include "kiln/ops/scans.hpp"
#include "kiln/ops/views.hpp"
#include "kiln/policy/policy.hpp"
#include "kiln/tensor/allocator.hpp"
#include "kiln/tensor/factories.hpp"
#include "kiln/tensor/print.hpp"
#include "kiln/tensor/shape.hpp"
#include "kiln/tensor/storage.hpp"
#include "kiln/tensor/tensor.hpp"
#include "kiln/tensor/view.hpp"

#if KILN_WITH_CUDA
#include "kiln/backend/cuda/cublas.hpp"
#include "kiln/backend/cuda/device.hpp"
#include "kiln/backend/cuda/memory.hpp"
#else
#include "kiln/backend/no_cuda.hpp"  // is_available() false, device_count() 0, the reason; memory 0
#endif
