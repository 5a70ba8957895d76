/// Standardizer: per-feature (x - mean) / std, fitted on training rows (sklearn's StandardScaler).
#pragma once
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/index.hpp"
#include "kiln/data/dataset.hpp"

namespace kiln::data {

/// Per-feature mean and scale of a set of rows, and the map x -> (x - mean) / scale applied in place.
/// Like sklearn.preprocessing.StandardScaler: the scale is the population standard deviation (ddof = 0,
/// divide by N), and a constant feature (all values equal) gets scale 1, so it maps to 0. Statistics are
/// accumulated in double (two passes: the mean, then the squared deviations from it). NaN is a missing
/// value, as sklearn takes it: fit leaves it out of its feature's statistics and transform keeps it
/// NaN; an infinity is a ValueError naming its row and feature (sklearn: "Input contains infinity").
///
/// Fit on the training rows only, then apply the same map to every split:
/// ```cpp
/// kiln::data::CsvDataset<13> boston("boston_house_prices.csv");
/// auto parts = kiln::data::random_split(boston, {0.8, 0.2}, /*seed=*/0);   // views of `boston`
/// auto scaler = kiln::data::Standardizer::fit(parts[0]);                  // train statistics
/// boston.standardize(scaler);                                              // both views see it
/// ```
class Standardizer {
 public:
  /// An unfitted standardizer: transform() throws until it is replaced by a fitted one.
  Standardizer() = default;

  /// Fitted on every row of `rows` (row-major, `features` values per row).
  static Standardizer fit(std::span<const float> rows, index_t features) {
    check_layout("fit", rows.size(), features);
    const index_t n = static_cast<index_t>(rows.size()) / features;
    std::vector<index_t> all(static_cast<std::size_t>(n));
    for (index_t i = 0; i < n; ++i) all[static_cast<std::size_t>(i)] = i;
    return fit(rows, features, all);
  }

  /// Fitted on the rows of `rows` listed in `which` (e.g. the indices of the training split), each in
  /// [0, rows.size() / features); a row listed twice counts twice.
  static Standardizer fit(std::span<const float> rows, index_t features, std::span<const index_t> which) {
    check_layout("fit", rows.size(), features);
    const index_t n = static_cast<index_t>(rows.size()) / features;
    if (which.empty())
      throw ValueError("kiln::data::Standardizer::fit: no rows to fit on; pass at least one row");
    for (index_t r : which)
      if (r < 0 || r >= n)
        throw ValueError("kiln::data::Standardizer::fit: row index " + std::to_string(r) + " is not in [0, " +
                         std::to_string(n) + "); pass indices of rows of the given data");
    const auto f = static_cast<std::size_t>(features);
    const auto at = [&](index_t r, std::size_t j) {
      return static_cast<double>(rows[static_cast<std::size_t>(r) * f + j]);
    };
    Standardizer s;
    s.mean_.assign(f, 0.0);
    s.scale_.assign(f, 0.0);
    std::vector<std::size_t> count(f, 0);  // the values that are not NaN
    for (index_t r : which)
      for (std::size_t j = 0; j < f; ++j) {
        const double v = at(r, j);
        if (std::isinf(v)) throw ValueError(where("fit", static_cast<std::size_t>(r), j, v));
        if (std::isnan(v)) continue;
        s.mean_[j] += v;
        ++count[j];
      }
    for (std::size_t j = 0; j < f; ++j) {
      if (count[j] == 0)
        throw ValueError("kiln::data::Standardizer::fit: feature " + std::to_string(j) +
                         " is NaN in every row fitted on; expected at least one value (NaN is missing)");
      s.mean_[j] /= static_cast<double>(count[j]);
      double squares = 0, first = std::nan("");
      bool constant = true;
      for (index_t r : which) {
        const double v = at(r, j);
        if (std::isnan(v)) continue;
        if (std::isnan(first)) first = v;
        squares += (v - s.mean_[j]) * (v - s.mean_[j]);
        constant = constant && v == first;
      }
      s.scale_[j] = constant ? 1.0 : std::sqrt(squares / static_cast<double>(count[j]));
    }
    return s;
  }

  /// Fitted on the inputs of every sample of `d` (a dataset, a Subset of one: the training split).
  template <dataset D>
  static Standardizer fit(const D& d) {
    constexpr index_t features = D::sample_shape::static_numel();
    const index_t n = d.size();
    std::vector<float> rows(static_cast<std::size_t>(n * features));
    std::vector<typename D::target_type> y(static_cast<std::size_t>(D::target_shape::static_numel()));
    for (index_t i = 0; i < n; ++i)
      d.read(i,
             std::span<float>(rows).subspan(static_cast<std::size_t>(i * features),
                                            static_cast<std::size_t>(features)),
             std::span<typename D::target_type>(y));
    return fit(rows, features);
  }

  /// rows[i, j] = (rows[i, j] - mean[j]) / scale[j] for every row (row-major, features() per row). An
  /// infinite value throws ValueError naming it before any is changed (sklearn checks first too).
  void transform(std::span<float> rows) const {
    check_fitted("transform", rows.size());
    const std::size_t f = mean_.size();
    for (std::size_t k = 0; k < rows.size(); ++k)
      if (std::isinf(rows[k])) throw ValueError(where("transform", k / f, k % f, rows[k]));
    for (std::size_t k = 0; k < rows.size(); ++k)
      rows[k] = static_cast<float>((static_cast<double>(rows[k]) - mean_[k % f]) / scale_[k % f]);
  }

  /// The inverse map: rows[i, j] = rows[i, j] * scale[j] + mean[j].
  void inverse_transform(std::span<float> rows) const {
    check_fitted("inverse_transform", rows.size());
    const std::size_t f = mean_.size();
    for (std::size_t k = 0; k < rows.size(); ++k)
      rows[k] = static_cast<float>(static_cast<double>(rows[k]) * scale_[k % f] + mean_[k % f]);
  }

  /// Whether fit() made this standardizer (a default-constructed one is not fitted).
  bool fitted() const { return !mean_.empty(); }
  /// The number of features it was fitted on (0 when not fitted).
  index_t features() const { return static_cast<index_t>(mean_.size()); }
  /// The per-feature means (sklearn's mean_).
  const std::vector<double>& mean() const { return mean_; }
  /// The per-feature population standard deviations, 1 for a constant feature (sklearn's scale_).
  const std::vector<double>& scale() const { return scale_; }

 private:
  static void check_layout(const char* function, std::size_t values, index_t features) {
    if (features <= 0)
      throw ValueError(std::string("kiln::data::Standardizer::") + function + ": features is " +
                       std::to_string(features) + "; pass the number of values per row (> 0)");
    if (values % static_cast<std::size_t>(features) != 0)
      throw ValueError(std::string("kiln::data::Standardizer::") + function + ": " + std::to_string(values) +
                       " values are not whole rows of " + std::to_string(features) +
                       " features; pass row-major rows of `features` values each");
  }
  /// "kiln::data::Standardizer::fit: row 3, feature 0 is inf; ...".
  static std::string where(const char* function, std::size_t row, std::size_t feature, double v) {
    return std::string("kiln::data::Standardizer::") + function + ": row " + std::to_string(row) + ", feature " +
           std::to_string(feature) + " is " + (v > 0 ? "inf" : "-inf") +
           "; expected finite values (NaN is taken as missing: fit leaves it out, transform keeps it)";
  }
  void check_fitted(const char* function, std::size_t values) const {
    if (!fitted())
      throw ValueError(
          std::string("kiln::data::Standardizer::") + function +
          ": the standardizer is not fitted; make it with Standardizer::fit(training rows) first");
    check_layout(function, values, features());
  }

  std::vector<double> mean_;
  std::vector<double> scale_;
};

}  // namespace kiln::data
