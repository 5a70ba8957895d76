/// Samplers: the order in which a loader visits a dataset, per epoch (torch.utils.data's samplers).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/index.hpp"

namespace kiln::data {

namespace detail {
/// splitmix64: the stream of seeds derived from (seed, epoch, ...), independent of thread counts.
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
inline std::uint64_t mix(std::uint64_t a, std::uint64_t b) { return mix(mix(a) ^ (b + 0x632BE59BD9B4E019ull)); }

/// A seeded permutation of [0, n) (Fisher-Yates with a 64-bit Mersenne twister).
inline std::vector<index_t> permutation(index_t n, std::uint64_t seed) {
  std::vector<index_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), index_t{0});
  std::mt19937_64 g(seed);
  for (index_t i = n - 1; i > 0; --i) {
    const index_t j = static_cast<index_t>(g() % static_cast<std::uint64_t>(i + 1));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}
}  // namespace detail

/// 0, 1, ..., n - 1 every epoch.
struct SequentialSampler {
  index_t length(index_t n) const { return n; }
  std::vector<index_t> indices(index_t n, std::uint64_t /*epoch*/) const {
    std::vector<index_t> v(static_cast<std::size_t>(n));
    std::iota(v.begin(), v.end(), index_t{0});
    return v;
  }
};

/// A fresh permutation every epoch, from (seed, epoch): the same seed gives the same orders. As
/// torch.utils.data.RandomSampler: `num_samples` (0: the dataset's size) indices an epoch, drawn
/// `replacement`-free (whole permutations one after another, the last cut short, when num_samples is
/// past the size) or with replacement (each uniform over the dataset).
struct RandomSampler {
  std::uint64_t seed = 0;
  bool replacement = false;
  index_t num_samples = 0;  ///< 0: the dataset's size (torch's None)

  /// Throws kiln::ValueError for a negative num_samples (a DataLoader checks when it gets the sampler).
  void check() const {
    if (num_samples < 0)
      throw ValueError("kiln::data::RandomSampler: num_samples is " + std::to_string(num_samples) +
                       "; it must be > 0 (or 0: the dataset's size)");
  }
  /// Samples an epoch; an empty dataset without num_samples throws ValueError, as torch's RandomSampler
  /// (num_samples=0 is not a positive integer): a shuffled epoch of nothing is a mistake, not a no-op.
  index_t length(index_t n) const {
    check();
    if (num_samples == 0 && n == 0)
      throw ValueError("kiln::data::RandomSampler: the dataset is empty; a random order needs at least one "
                       "sample (torch: \"num_samples should be a positive integer value, but got num_samples=0\")");
    return num_samples > 0 ? num_samples : n;
  }
  std::vector<index_t> indices(index_t n, std::uint64_t epoch) const {
    const index_t count = length(n);
    const std::uint64_t epoch_seed = detail::mix(seed, epoch);
    if (!replacement && count == n) return detail::permutation(n, epoch_seed);
    if (n == 0)
      throw ValueError("kiln::data::RandomSampler: " + std::to_string(count) +
                       " samples asked of an empty dataset");
    std::vector<index_t> out;
    out.reserve(static_cast<std::size_t>(count));
    if (replacement) {
      std::mt19937_64 g(epoch_seed);  // g() % n as detail::permutation: the same on every standard library
      for (index_t i = 0; i < count; ++i) out.push_back(static_cast<index_t>(g() % static_cast<std::uint64_t>(n)));
      return out;
    }
    for (std::uint64_t k = 0; static_cast<index_t>(out.size()) < count; ++k) {
      const auto p = detail::permutation(n, detail::mix(epoch_seed, k));
      const auto take = std::min<std::size_t>(p.size(), static_cast<std::size_t>(count) - out.size());
      out.insert(out.end(), p.begin(), p.begin() + static_cast<std::ptrdiff_t>(take));
    }
    return out;
  }
};

/// This rank's share of the dataset, as torch.utils.data.DistributedSampler: the (shuffled, with the
/// same seed and epoch on every rank) indices are padded by repeating from the start to a multiple of
/// `world_size` (or truncated with drop_last), then rank r takes every world_size-th from r. The epoch
/// comes from the loader: call the loader's set_epoch on every rank before each epoch (torch's
/// sampler.set_epoch), or let it count epochs up from 0 (it does).
/// world_size and rank must be given (torch reads them from its process group; kiln's is an object):
///   DistributedSampler{.world_size = ddp.world_size(), .rank = ddp.rank(), .seed = seed}
struct DistributedSampler {
  int world_size = 0;  ///< required
  int rank = -1;       ///< required
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool drop_last = false;

  /// Throws kiln::ValueError unless world_size and rank were given and rank is in [0, world_size) (a
  /// DataLoader checks when it gets the sampler).
  void check() const {
    if (world_size == 0 || rank == -1)
      throw ValueError("kiln::data::DistributedSampler: world_size and rank are required "
                       "({.world_size = group.size(), .rank = group.rank()}); this one has world_size " +
                       std::to_string(world_size) + ", rank " + std::to_string(rank));
    if (world_size < 1)
      throw ValueError("kiln::data::DistributedSampler: world_size is " + std::to_string(world_size) +
                       "; it must be >= 1");
    if (rank < 0 || rank >= world_size)
      throw ValueError("kiln::data::DistributedSampler: rank " + std::to_string(rank) + " is not in [0, " +
                       std::to_string(world_size) + ")");
  }
  /// This rank's samples per epoch (torch's num_samples): n / world_size, rounded up (padding) or down
  /// (drop_last).
  index_t length(index_t n) const {
    check();
    const index_t w = world_size;
    return drop_last ? n / w : (n + w - 1) / w;
  }
  std::vector<index_t> indices(index_t n, std::uint64_t epoch) const {
    const index_t per_rank = length(n), w = world_size;
    std::vector<index_t> all = shuffle ? detail::permutation(n, detail::mix(seed, epoch)) : SequentialSampler{}.indices(n, epoch);
    const index_t total = per_rank * w;
    if (!drop_last && n > 0)
      for (index_t i = n; i < total; ++i) all.push_back(all[static_cast<std::size_t>((i - n) % n)]);
    all.resize(static_cast<std::size_t>(total));
    std::vector<index_t> mine;
    mine.reserve(static_cast<std::size_t>(per_rank));
    for (index_t i = rank; i < total; i += w) mine.push_back(all[static_cast<std::size_t>(i)]);
    return mine;
  }
};

}  // namespace kiln::data
