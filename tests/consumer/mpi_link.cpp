// kiln::mpi from an outside project: a singleton job (world size 1, no mpirun) makes a
// ProcessGroup<Mpi>, broadcasts from rank 0 and meets at a barrier.
#include <kiln/parallel/mpi.hpp>

#include <cstdio>
#include <exception>

int main() {
  try {
    kiln::parallel::ProcessGroup<kiln::Mpi> group;
    float values[3] = {1.0f, 2.0f, 3.0f};
    group.broadcast(values, 3, 0, "the consumer's broadcast");
    group.barrier();
    const bool ok = group.size() == 1 && group.rank() == 0 && values[2] == 3.0f;
    std::printf("consumer mpi: rank %d of %d: %s\n", group.rank(), group.size(), ok ? "ok" : "wrong");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("consumer mpi: %s\n", e.what());
    return 1;
  }
}
