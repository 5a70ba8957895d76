/// GPU timing for the CUDA benches: CUDA events on kiln's stream around back-to-back runs (nvcc only).
#pragma once
#include <kiln/cuda.hpp>

namespace kiln::bench {

/// A Harness::add_timed body: seconds per iteration of `inner` back-to-back runs of f, measured with
/// events on kiln's current stream.
template <class F>
auto event_timed(int inner, F f) {
  return [inner, f]() mutable {
    kiln::cuda::Event start(true), stop(true);
    const cudaStream_t s = kiln::cuda::current_stream();
    start.record(s);
    for (int k = 0; k < inner; ++k) f();
    stop.record(s);
    stop.synchronize();
    return static_cast<double>(start.elapsed_ms(stop)) * 1e-3 / inner;
  };
}

}  // namespace kiln::bench
