/// Transforms: per-sample augmentation and normalisation applied by the loader's workers, seeded per
/// sample from (seed, epoch, position) so that batches do not depend on the worker count.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/index.hpp"
#include "kiln/data/sampler.hpp"

namespace kiln::data {

/// The random stream of one sample (splitmix64): cheap to create per sample.
/// A uniform random bit generator as the standard library's engines, so the <random> distributions take
/// it (`std::normal_distribution<float>(m, s)(rng)`; their values differ between standard libraries,
/// normal()'s do not).
class SampleRng {
 public:
  using result_type = std::uint64_t;
  explicit SampleRng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() { return state_ = detail::mix(state_); }
  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  /// Uniform in [0, n); n must be positive (ValueError otherwise, as torch.randint(0, 0)).
  index_t below(index_t n) {
    if (n <= 0)
      throw ValueError("kiln::data::SampleRng::below: n is " + std::to_string(n) +
                       "; it must be positive (a value in [0, n) is drawn)");
    return static_cast<index_t>(next() % static_cast<std::uint64_t>(n));
  }
  /// Normal with this mean and standard deviation (Box-Muller on two uniform(): the same values on
  /// every platform).
  double normal(double mean = 0.0, double std = 1.0) {
    const double u1 = 1.0 - uniform(), u2 = uniform();  // u1 in (0, 1]: log(u1) is finite
    return mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return std::numeric_limits<result_type>::max(); }
  result_type operator()() { return next(); }

 private:
  std::uint64_t state_;
};

/// A transform T on samples of shape S ([C, H, W] or [F]): `t.template apply<S>(x, rng)` changes x in
/// place (x holds S's numel values: floats, or bytes for a Bytes<...> dataset, where the flips and crops
/// work alike and Normalize moves to the device: DeviceLoader's ScaleNormalize). Compose them with
/// Compose<...>.

namespace detail {
/// A transform called by hand on a span that is not one sample of S throws ValueError (it would read and
/// write past the span); the loader always gives one.
template <class S>
void require_one_sample(std::size_t size, const char* who) {
  if (size != static_cast<std::size_t>(S::static_numel()))
    throw ValueError(std::string("kiln::data::") + who + ": the span holds " + std::to_string(size) +
                     " values; expected one sample of " + std::to_string(S::static_numel()));
}
}  // namespace detail

/// Does nothing (the loader's default).
struct Identity {
  template <class S, class E>
  void apply(std::span<E>, SampleRng&) const {}
};

/// x[c] = (x[c] - mean[c]) / std[c] per channel (dimension 0 of the sample), as
/// torchvision.transforms.Normalize (the same float operations: a subtraction, then a division, so the
/// results are torchvision's bit for bit); a single mean or std applies to every channel.
struct Normalize {
  std::vector<float> mean;
  std::vector<float> std;
  template <class S, class E>
  void apply(std::span<E> x, SampleRng&) const {
    static_assert(std::is_same_v<E, float>,
                  "kiln::data::Normalize works on float samples; a Bytes<...> dataset's batches are scaled and "
                  "normalised where they land: DeviceLoader(loader, ScaleNormalize{255, mean, std})");
    if constexpr (std::is_same_v<E, float>) run<S>(x);  // (the assertion's error alone otherwise)
  }

 private:
  template <class S>
  void run(std::span<float> x) const {
    detail::require_one_sample<S>(x.size(), "Normalize");
    const index_t channels = S::extents[0];
    const auto n = static_cast<index_t>(x.size()), plane = n / channels;
    const auto fits = [&](const std::vector<float>& v) {
      return v.size() == 1 || static_cast<index_t>(v.size()) == channels;
    };
    if (!fits(mean) || !fits(std))
      throw ValueError("kiln::data::Normalize: " + std::to_string(mean.size()) + " means and " +
                       std::to_string(std.size()) + " stds for " + std::to_string(channels) +
                       " channels; give one value or one per channel for each");
    for (std::size_t k = 0; k < std.size(); ++k)
      if (std[k] == 0.0f)  // as torchvision's normalize (and ScaleNormalize)
        throw ValueError("kiln::data::Normalize: std[" + std::to_string(k) + "] is 0; dividing by it would give "
                         "inf or NaN");
    for (index_t c = 0; c < channels; ++c) {
      const auto k = static_cast<std::size_t>(c);
      const float m = mean[mean.size() == 1 ? 0 : k], sd = std[std.size() == 1 ? 0 : k];
      float* p = x.data() + c * plane;
      for (index_t i = 0; i < plane; ++i) p[i] = (p[i] - m) / sd;
    }
  }
};

/// Flips the image left-right with probability p (torchvision.transforms.RandomHorizontalFlip).
struct RandomHorizontalFlip {
  double p = 0.5;
  template <class S, class E>
  void apply(std::span<E> x, SampleRng& rng) const {
    static_assert(S::rank == 3, "kiln::data::RandomHorizontalFlip: samples must be images [C, H, W]");
    if constexpr (S::rank == 3) {  // (the assertion's error alone otherwise)
      detail::require_one_sample<S>(x.size(), "RandomHorizontalFlip");
      if (!(rng.uniform() < p)) return;  // flips where torchvision does: not for p NaN
      constexpr index_t C = S::extents[0], H = S::extents[1], W = S::extents[2];
      for (index_t r = 0; r < C * H; ++r) {
        E* row = x.data() + r * W;
        for (index_t i = 0, j = W - 1; i < j; ++i, --j) std::swap(row[i], row[j]);
      }
    }
  }
};

/// Adds normal noise of mean `mean` and standard deviation `sigma` to every value, then clamps to [0, 1]
/// unless `clip` is false (torchvision.transforms.v2.GaussianNoise(mean=0.0, sigma=0.1, clip=True), for
/// images in [0, 1]; features of a table: `{.sigma = 0.05, .clip = false}`). Float samples only.
struct GaussianNoise {
  double mean = 0.0;
  double sigma = 0.1;
  bool clip = true;
  template <class S, class E>
  void apply(std::span<E> x, SampleRng& rng) const {
    static_assert(std::is_floating_point_v<E>,
                  "kiln::data::GaussianNoise works on float samples, not a Bytes<...> dataset's bytes");
    detail::require_one_sample<S>(x.size(), "GaussianNoise");
    if (!(sigma >= 0.0))
      throw ValueError("kiln::data::GaussianNoise: sigma is " + std::to_string(sigma) + "; give sigma >= 0");
    for (E& v : x) {
      const double noisy = static_cast<double>(v) + rng.normal(mean, sigma);
      v = static_cast<E>(clip ? std::fmin(std::fmax(noisy, 0.0), 1.0) : noisy);
    }
  }
};

/// How RandomCrop fills its padding, as torchvision's padding_mode: `constant` (the value `fill`),
/// `edge` (the nearest edge pixel), `reflect` (mirrored without the edge: 2 1 | 0 1 2 3; padding below
/// the size), `symmetric` (mirrored with the edge: 1 0 | 0 1 2 3; padding up to the size).
enum class PaddingMode { constant, edge, reflect, symmetric };

/// Pads the image by `padding` pixels on every side and crops an H x W window at a random place
/// (torchvision.transforms.RandomCrop(size = the image's, padding, fill = 0, padding_mode = "constant")).
/// The default padding 0 crops the whole image, as RandomCrop(size) of an image of that size; CIFAR's
/// augmentation is `RandomCrop{.padding = 4}`. `fill` is in the sample's units (bytes: 0 to 255, as
/// torchvision pads before ToTensor). A negative padding, or one too large for reflect / symmetric,
/// throws ValueError, as does one past 2^30 (`max_padding`).
struct RandomCrop {
  index_t padding = 0;
  double fill = 0.0;
  PaddingMode padding_mode = PaddingMode::constant;
  static constexpr index_t max_padding = index_t{1} << 30;

  template <class S, class E>
  void apply(std::span<E> x, SampleRng& rng) const {
    static_assert(S::rank == 3, "kiln::data::RandomCrop: samples must be images [C, H, W]");
    if constexpr (S::rank == 3) crop<S>(x, rng);  // (the assertion's error alone otherwise)
  }

 private:
  template <class S, class E>
  void crop(std::span<E> x, SampleRng& rng) const {
    constexpr index_t C = S::extents[0], H = S::extents[1], W = S::extents[2];
    detail::require_one_sample<S>(x.size(), "RandomCrop");
    check<E>(H, W);
    const index_t dy = rng.below(2 * padding + 1) - padding, dx = rng.below(2 * padding + 1) - padding;
    if (dy == 0 && dx == 0) return;
    const E fill_value = static_cast<E>(fill);
    // The sample before the crop: one buffer per thread (a worker crops sample after sample of one shape).
    thread_local std::vector<E> src;
    src.assign(x.begin(), x.end());
    for (index_t c = 0; c < C; ++c)
      for (index_t h = 0; h < H; ++h) {
        const index_t sh = source(h + dy, H);  // the window's row in the unpadded image (-1: fill)
        for (index_t w = 0; w < W; ++w) {
          const index_t sw = source(w + dx, W);
          x[static_cast<std::size_t>((c * H + h) * W + w)] =
              sh >= 0 && sw >= 0 ? src[static_cast<std::size_t>((c * H + sh) * W + sw)] : fill_value;
        }
      }
  }

  /// Where position i of the padded axis (0 at the first unpadded pixel) reads from, or -1 for `fill`.
  index_t source(index_t i, index_t n) const {
    if (i >= 0 && i < n) return i;
    switch (padding_mode) {
      case PaddingMode::constant: return -1;
      case PaddingMode::edge: return i < 0 ? 0 : n - 1;
      case PaddingMode::reflect: return i < 0 ? -i : 2 * (n - 1) - i;
      case PaddingMode::symmetric: return i < 0 ? -i - 1 : 2 * n - 1 - i;
    }
    return -1;
  }
  template <class E>
  void check(index_t h, index_t w) const {
    const auto fail = [&](const std::string& why) {
      throw ValueError("kiln::data::RandomCrop: " + why + " (padding " + std::to_string(padding) + ", image " +
                       std::to_string(h) + " x " + std::to_string(w) + ")");
    };
    if (padding < 0) fail("the padding must be >= 0");
    if (padding > max_padding) fail("the padding must be at most 2^30");  // (2 padding + 1 and h + dy stay in range)
    if (padding_mode == PaddingMode::reflect && (padding >= h || padding >= w))
      fail("reflect padding must be smaller than the image's height and width");
    if (padding_mode == PaddingMode::symmetric && (padding > h || padding > w))
      fail("symmetric padding must be at most the image's height and width");
    if constexpr (std::is_integral_v<E>) {
      if (!(fill >= static_cast<double>(std::numeric_limits<E>::min()) &&
            fill <= static_cast<double>(std::numeric_limits<E>::max()) && fill == static_cast<double>(static_cast<E>(fill))))
        fail("fill " + std::to_string(fill) + " is not a value of the samples' integer type");
    }
  }
};

/// Applies Ts in order (torchvision.transforms.Compose).
template <class... Ts>
struct Compose {
  std::tuple<Ts...> steps;
  Compose() = default;
  explicit Compose(Ts... ts) requires(sizeof...(Ts) > 0) : steps(std::move(ts)...) {}  // (Compose<>: the default)
  template <class S, class E>
  void apply(std::span<E> x, SampleRng& rng) const {
    std::apply([&](const auto&... t) { (t.template apply<S>(x, rng), ...); }, steps);
  }
};

}  // namespace kiln::data
