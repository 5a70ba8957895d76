/// Subset (a dataset seen through a list of indices) and random_split (torch.utils.data.random_split).
#pragma once
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/number_text.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/core/index.hpp"
#include "kiln/core/warning.hpp"
#include "kiln/data/dataset.hpp"

namespace kiln::data {

/// The samples of a dataset `D` at the given indices, in that order (torch.utils.data.Subset); itself a
/// dataset, of D's element type, and a byte dataset where D is one (`Bytes(split)` of a Cifar10 split
/// feeds a DeviceLoader). A view: it keeps a pointer to `base`, which must outlive it, and sees later
/// changes to it (CsvDataset::standardize after random_split reaches every split).
/// Example: `Subset<CsvDataset<13>> firsts(boston, {0, 1, 2});  // samples 0..2 of boston`
template <class D>
class Subset {
  // >>> Stopped here? The type given to Subset is not a kiln dataset. <<<
  static_assert(dataset<D>,
                "kiln::data::Subset<D>: D must be a kiln::data::dataset (sample_shape, target_type, "
                "target_shape, size(), read(i, x, y) const); pass a dataset type such as CsvDataset<13>");

 public:
  using sample_shape = typename D::sample_shape;
  using sample_type = sample_type_t<D>;
  using target_type = typename D::target_type;
  using target_shape = typename D::target_shape;

  /// The samples of `base` at `indices` (each in [0, base.size()), repeats allowed); ValueError otherwise.
  Subset(const D& base, std::vector<index_t> indices) : base_(&base), indices_(std::move(indices)) {
    const index_t n = base.size();
    for (std::size_t k = 0; k < indices_.size(); ++k)
      if (indices_[k] < 0 || indices_[k] >= n)
        throw ValueError("kiln::data::Subset: index " + std::to_string(indices_[k]) + " (position " +
                         std::to_string(k) + ") is not in [0, " + std::to_string(n) +
                         "); pass indices of samples of the base dataset");
  }
  /// A Subset of a temporary would dangle: keep the dataset in a variable first.
  Subset(const D&& base, std::vector<index_t> indices) = delete;

  index_t size() const { return static_cast<index_t>(indices_.size()); }
  /// Sample `indices()[i]` of the base dataset; i in [0, size()).
  void read(index_t i, std::span<sample_type> x, std::span<target_type> y) const {
    base_->read(base_index("read", i), x, y);
  }
  /// The same sample as bytes, where the base dataset keeps bytes (byte_dataset).
  void read_bytes(index_t i, std::span<std::uint8_t> x, std::span<target_type> y) const
    requires byte_dataset<D>
  {
    base_->read_bytes(base_index("read_bytes", i), x, y);
  }
  /// The indices into the base dataset (torch's Subset.indices).
  const std::vector<index_t>& indices() const { return indices_; }
  /// The dataset this is a view of (torch's Subset.dataset).
  const D& base() const { return *base_; }

 private:
  index_t base_index(const char* who, index_t i) const {
    if (i < 0 || i >= size())
      throw ValueError(std::string("kiln::data::Subset::") + who + ": index " + std::to_string(i) +
                       " out of range; expected 0 <= i < " + std::to_string(size()));
    return indices_[static_cast<std::size_t>(i)];
  }
  const D* base_;
  std::vector<index_t> indices_;
};

namespace detail {
/// `v` in the fewest digits that read back as `v` (0.9, not 0.900000), for messages.
inline std::string fraction_text(double v) { return kiln::detail::shortest_text(v); }

/// A seeded permutation of [0, n): Fisher-Yates driven by std::mt19937_64, whose output the standard
/// fixes, so the same seed gives the same split with every compiler and standard library.
inline std::vector<index_t> split_permutation(index_t n, std::uint64_t seed) {
  std::vector<index_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), index_t{0});
  std::mt19937_64 g(seed);
  for (index_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<index_t>(g() % static_cast<std::uint64_t>(i + 1));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}

/// PyTorch's lengths from fractions: floor(n * f) each, then the remaining samples one by one to the
/// parts in order, round-robin (n = 506, {0.8, 0.2} -> 404 + 101 = 505, remainder 1 -> {405, 101}).
inline std::vector<index_t> split_lengths(index_t n, std::span<const double> fractions) {
  if (fractions.empty()) throw ValueError("kiln::data::random_split: no fractions; pass e.g. {0.8, 0.2}");
  double sum = 0;
  for (std::size_t k = 0; k < fractions.size(); ++k) {
    if (!(fractions[k] >= 0 && fractions[k] <= 1))
      throw ValueError("kiln::data::random_split: fraction " + std::to_string(k) + " is " +
                       fraction_text(fractions[k]) + "; pass fractions in [0, 1] that sum to 1");
    sum += fractions[k];
  }
  // Python's math.isclose(sum, 1) (relative tolerance 1e-9) and sum <= 1, as torch checks it.
  if (!(std::abs(sum - 1.0) <= 1e-9 * std::max(std::abs(sum), 1.0) && sum <= 1.0))
    throw ValueError(
        "kiln::data::random_split: the fractions sum to " + fraction_text(sum) +
        "; pass fractions that sum to 1 (e.g. {0.8, 0.2}) or lengths that sum to the dataset's size");
  std::vector<index_t> lengths;
  index_t taken = 0;
  for (double f : fractions) {
    lengths.push_back(static_cast<index_t>(std::floor(static_cast<double>(n) * f)));
    taken += lengths.back();
  }
  for (index_t i = 0; i < n - taken; ++i) ++lengths[static_cast<std::size_t>(i) % lengths.size()];
  for (std::size_t k = 0; k < lengths.size(); ++k)  // as torch warns
    if (lengths[k] == 0)
      kiln::warn("kiln::data::random_split: part " + std::to_string(k) + " (fraction " + fraction_text(fractions[k]) +
                 ") gets none of the " + std::to_string(n) + " samples: an empty Subset");
  return lengths;
}
}  // namespace detail

/// Splits `d` at random into non-overlapping Subsets of the given lengths, which must sum to d.size()
/// (torch.utils.data.random_split): one seeded permutation of [0, d.size()), cut into consecutive
/// pieces. The same seed gives the same split. The Subsets are views of `d`.
template <class D>
std::vector<Subset<D>> random_split(const D& d, const std::vector<index_t>& lengths, std::uint64_t seed) {
  // >>> Stopped here? The first argument of random_split is not a kiln dataset. <<<
  static_assert(dataset<D>,
                "kiln::data::random_split: the first argument must be a kiln::data::dataset "
                "(sample_shape, target_type, target_shape, size(), read(i, x, y) const)");
  const index_t n = d.size();
  index_t total = 0;
  bool over = false;  // the sum passed n (and might wrap if added up)
  for (std::size_t k = 0; k < lengths.size(); ++k) {
    if (lengths[k] < 0)
      throw ValueError("kiln::data::random_split: length " + std::to_string(k) + " is " +
                       std::to_string(lengths[k]) + "; pass lengths >= 0");
    over |= lengths[k] > n - total;
    if (!over) total += lengths[k];
  }
  if (lengths.empty() || over || total != n)
    throw ValueError("kiln::data::random_split: the lengths sum to " +
                     (over ? std::string("more than ") + std::to_string(n) : std::to_string(total)) +
                     " but the dataset has " + std::to_string(n) + " samples; pass lengths that sum to " +
                     std::to_string(n) + " or fractions that sum to 1");
  const std::vector<index_t> order = detail::split_permutation(n, seed);
  std::vector<Subset<D>> parts;
  parts.reserve(lengths.size());
  auto from = order.begin();
  for (index_t len : lengths) {
    parts.emplace_back(d, std::vector<index_t>(from, from + len));
    from += len;
  }
  return parts;
}

/// Splits `d` at random into parts of the given fractions of d.size(), which must sum to 1. Lengths follow
/// PyTorch: floor(d.size() * fraction) each, then the samples left over go one each to the first, second,
/// ... part (round-robin), so 506 samples split {0.8, 0.2} give 405 and 101.
template <class D>
std::vector<Subset<D>> random_split(const D& d, const std::vector<double>& fractions, std::uint64_t seed) {
  static_assert(dataset<D>,
                "kiln::data::random_split: the first argument must be a kiln::data::dataset "
                "(sample_shape, target_type, target_shape, size(), read(i, x, y) const)");
  return random_split(d, detail::split_lengths(d.size(), fractions), seed);
}

/// random_split(d, {0.8, 0.2}, seed) (fractions) or random_split(d, {400, 106}, seed) (lengths).
template <class D, class T>
std::vector<Subset<D>> random_split(const D& d, std::initializer_list<T> parts, std::uint64_t seed) {
  // >>> Stopped here? Write the parts as all fractions ({0.8, 0.2}) or all integers ({400, 106}). <<<
  static_assert(std::is_arithmetic_v<T>,
                "kiln::data::random_split: parts must be numbers: fractions such as "
                "{0.8, 0.2} or lengths such as {400, 106}");
  if constexpr (std::is_same_v<T, float>) {
    // Each float as the decimal it was written as ({0.8f, 0.2f} is {0.8, 0.2}; widened, 0.800000011920929
    // and 0.200000002980232 sum past 1 and are refused).
    std::vector<double> fractions;
    for (const float v : parts) {
      double exact = v;
      kiln::detail::parse_whole(kiln::detail::shortest_text(v), exact);
      fractions.push_back(exact);
    }
    return random_split(d, fractions, seed);
  } else if constexpr (std::is_floating_point_v<T>)
    return random_split(d, std::vector<double>(parts.begin(), parts.end()), seed);
  else
    return random_split(d, std::vector<index_t>(parts.begin(), parts.end()), seed);
}

/// Splitting a temporary would leave the Subsets dangling: keep the dataset in a variable first.
template <class D>
std::vector<Subset<D>> random_split(const D&& d, const std::vector<index_t>& lengths,
                                    std::uint64_t seed) = delete;
template <class D>
std::vector<Subset<D>> random_split(const D&& d, const std::vector<double>& fractions,
                                    std::uint64_t seed) = delete;
template <class D, class T>
std::vector<Subset<D>> random_split(const D&& d, std::initializer_list<T> parts, std::uint64_t seed) = delete;

}  // namespace kiln::data
