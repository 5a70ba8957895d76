// cuDNN's deterministic algorithms for a scope (torch.backends.cudnn.deterministic = True), for GPU tests
// that compare two trainings over many steps: the default backward-filter algorithms may sum with atomics,
// and a difference of 1e-7 in a gradient can flip a ReLU or a max-pool choice a few steps later and move a
// parameter by about the learning rate, far above such a test's tolerance. Without cuDNN: nothing to do.
#pragma once
#include <kiln/core/config.hpp>
#if KILN_WITH_CUDNN
#include <kiln/backend/cuda/cudnn.hpp>
#endif

namespace kiln::test {

class DeterministicCudnn {
 public:
#if KILN_WITH_CUDNN
  DeterministicCudnn() : was_(kiln::cuda::cudnn_deterministic()) { kiln::cuda::set_cudnn_deterministic(true); }
  ~DeterministicCudnn() { kiln::cuda::set_cudnn_deterministic(was_); }

 private:
  bool was_;
#endif
};

}  // namespace kiln::test
