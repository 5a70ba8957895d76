// kiln-info: what this build of kiln can use here, like torch.cuda.is_available() / device_count() /
// nvidia-smi plus the CPU side. Always exits 0 when it could print the facts (also without a GPU).
#include <kiln/backend/cpu/blas_kernels.hpp>
#include <kiln/kiln.hpp>

#include <cstdio>
#include <exception>
#include <string>
#include <thread>

#if KILN_HAS_OPENMP
#include <omp.h>
#endif
#if KILN_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif
#if KILN_WITH_CUDA && defined(KILN_WITH_CUDNN) && KILN_WITH_CUDNN
#include <cudnn.h>
#endif
#if KILN_WITH_BLAS
#include <cblas.h>
#endif

#ifndef KILN_INFO_VERSION
#define KILN_INFO_VERSION "unknown"
#endif

namespace {

void print_build() {
  std::printf("kiln %s\n", KILN_INFO_VERSION);
#if defined(__clang__)
  std::printf("  compiler: clang %d.%d.%d, C++ %ld\n", __clang_major__, __clang_minor__, __clang_patchlevel__, __cplusplus);
#elif defined(__GNUC__)
  std::printf("  compiler: g++ %d.%d.%d, C++ %ld\n", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__, __cplusplus);
#endif
  std::printf("  half/bfloat16 types: %s\n", KILN_HAS_CUDA_HALF ? "CUDA's __half / __nv_bfloat16" : "kiln's storage-only fallback");
}

#if KILN_WITH_CUDA
void print_cuda() {
  namespace kc = kiln::cuda;
  std::printf("CUDA support compiled in: yes (KILN_WITH_CUDA=1)\n");
  const int count = kc::device_count();
  if (count > 0) std::printf("CUDA available: yes\n");
  else std::printf("CUDA available: no (%s)\n", kc::unavailable_reason().c_str());
  const int rt = kc::runtime_version(), drv = kc::driver_version();
  std::printf("  CUDA runtime: %s (%d)\n", kc::version_string(rt).c_str(), rt);
  if (drv > 0) std::printf("  CUDA driver supports up to: %s (%d)\n", kc::version_string(drv).c_str(), drv);
  else std::printf("  CUDA driver: none found\n");
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    std::printf("  cuBLAS: %d.%d.%d\n", major, minor, patch);
#if defined(KILN_WITH_CUDNN) && KILN_WITH_CUDNN
  const std::size_t v = cudnnGetVersion();
  std::printf("  cuDNN: %zu.%zu.%zu\n", v / 10000, (v % 10000) / 100, v % 100);
#else
  std::printf("  cuDNN: not linked\n");
#endif
  std::printf("  device count: %d\n", count);
  for (int i = 0; i < count; ++i) {
    try {
      const kc::DeviceProperties p = kc::device_properties(i);
      std::printf("  cuda:%d  %s  (compute capability %s, sm_%d%d)\n", p.index, p.name.c_str(),
                  p.compute_capability().c_str(), p.major, p.minor);
      std::printf("    multiprocessors: %d, SM clock %d MHz, %d threads/SM\n", p.multiprocessor_count, p.clock_khz / 1000,
                  p.max_threads_per_multiprocessor);
      std::printf("    memory: %s total, %s free; bus %d bit, clock %d MHz\n", kiln::format_bytes(p.total_memory).c_str(),
                  kiln::format_bytes(p.free_memory).c_str(), p.memory_bus_width, p.memory_clock_khz / 1000);
      std::printf("    L2 cache: %s, shared memory/block: %s (opt-in %s)\n", kiln::format_bytes(p.l2_cache_bytes).c_str(),
                  kiln::format_bytes(p.shared_memory_per_block).c_str(),
                  kiln::format_bytes(p.shared_memory_per_block_optin).c_str());
      std::printf("    %s  PCI %s\n", p.uuid.c_str(), p.pci_bus_id.c_str());
    } catch (const std::exception& e) {
      std::printf("  cuda:%d  could not be queried: %s\n", i, e.what());
    }
  }
}
#else
void print_cuda() {
  std::printf("CUDA support compiled in: no (link kiln::cuda to enable it)\n");
  std::printf("CUDA available: no (kiln was built without CUDA support)\n");
}
#endif

void print_cpu() {
  std::printf("CPU\n");
  std::printf("  hardware threads: %u\n", std::thread::hardware_concurrency());
#if KILN_HAS_OPENMP
  std::printf("  OpenMP: %d (max threads %d)\n", _OPENMP, omp_get_max_threads());
#else
  std::printf("  OpenMP: not compiled in (CPU loops run on one thread)\n");
#endif
#if KILN_WITH_BLAS
  std::printf("  BLAS: %s\n", openblas_get_config());
  std::printf("  BLAS threads: %d\n", openblas_get_num_threads());
  // Debian 12's OpenBLAS runs Prescott's kernels on CPUs newer than it (README, Requirements).
  std::printf("  BLAS kernels: %s\n", kiln::backend::cpu::blas_description().c_str());
  if (const std::string better = kiln::backend::cpu::better_blas_coretype(); !better.empty())
    std::printf("    older than this CPU's: OPENBLAS_CORETYPE=%s runs its GEMMs several times faster\n", better.c_str());
#else
  std::printf("  BLAS: not linked (CPU matmul needs kiln::blas)\n");
#endif
}

}  // namespace

int main() {
  try {
    print_build();
    print_cuda();
    print_cpu();
  } catch (const std::exception& e) {
    std::printf("kiln-info: %s\n", e.what());
    return 1;
  }
  return 0;
}
