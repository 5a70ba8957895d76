// kiln::nccl from an outside project: links NCCL (and kiln::cuda's libraries) into a g++ program that
// must start on a machine without a GPU or driver, and asks NCCL its version.
#include <nccl.h>

#include <cstdio>

int main() {
  int version = 0;
  const ncclResult_t rc = ncclGetVersion(&version);
  std::printf("consumer nccl: NCCL %d (%s)\n", version, ncclGetErrorString(rc));
  return rc == ncclSuccess && version > 0 ? 0 : 1;
}
