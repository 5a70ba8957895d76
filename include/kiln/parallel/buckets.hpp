/// Gradient buckets: how DistributedDataParallel groups a model's gradients into all-reduce messages,
/// in reverse layer order (the order backward produces them), as torch.nn.parallel.DistributedDataParallel.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "kiln/core/nan.hpp"
#include "kiln/core/errors.hpp"
#include "kiln/core/index.hpp"
#include "kiln/nn/layer.hpp"

namespace kiln::parallel {

/// Elements [begin, end) of the gradient arena, reduced as one message once backward has passed `begin`.
struct Bucket {
  index_t begin = 0;
  index_t end = 0;
  std::vector<std::string> parameters;  ///< the parameters in it, last first ("2.bias", "2.weight")
  index_t size() const { return end - begin; }
};

/// Bucket sizes, in MiB (2^20 bytes) of gradient: torch DDP's bucket_cap_mb (25) and its smaller first
/// bucket (1 MiB), which starts communication early in the backward pass.
struct BucketOptions {
  double bucket_cap_mb = 25;
  double first_bucket_mb = 1;
};

/// Buckets over `params` (offsets and sizes in the arena, in forward order, as a model names them), whose
/// gradients have `element_bytes` bytes each. Parameters are taken from the last: a bucket is closed once
/// it holds at least its cap (first_bucket_mb for the first, bucket_cap_mb after); a parameter is never
/// split, so one larger than the cap has a bucket of its own. The buckets tile the arena from its end
/// down to 0 (each bucket's begin is the next one's end).
inline std::vector<Bucket> plan_buckets(std::vector<nn::ParameterInfo> params, std::size_t element_bytes,
                                        const BucketOptions& o = {}) {
  if (!(o.bucket_cap_mb > 0) || !(o.first_bucket_mb > 0) || kiln::detail::is_inf_or_nan(o.bucket_cap_mb) ||
      kiln::detail::is_inf_or_nan(o.first_bucket_mb))  // (bit tests: -ffast-math folds std::isfinite)
    throw ValueError("kiln::parallel::plan_buckets: bucket sizes must be positive and finite (bucket_cap_mb " +
                     std::to_string(o.bucket_cap_mb) + ", first_bucket_mb " + std::to_string(o.first_bucket_mb) + ")");
  std::sort(params.begin(), params.end(), [](const auto& a, const auto& b) { return a.offset > b.offset; });
  std::vector<Bucket> buckets;
  index_t expected_end = params.empty() ? 0 : params.front().offset + params.front().count;
  Bucket current;
  current.end = expected_end;
  const auto cap_elements = [&](double mb) {  // a cap past any arena (1e30 MiB) is one bucket, not UB
    const double elements = mb * 1048576.0 / static_cast<double>(element_bytes);
    if (!(elements < 0x1p62)) return index_t{1} << 62;
    return std::max<index_t>(1, static_cast<index_t>(elements));
  };
  for (const auto& p : params) {
    if (p.offset + p.count != expected_end)
      throw ValueError("kiln::parallel::plan_buckets: parameter " + p.name + " at offset " + std::to_string(p.offset) +
                       " does not end where the next one starts (" + std::to_string(expected_end) +
                       "); the arena must be contiguous");
    current.begin = p.offset;
    current.parameters.push_back(p.name);
    expected_end = p.offset;
    if (current.size() >= cap_elements(buckets.empty() ? o.first_bucket_mb : o.bucket_cap_mb)) {
      buckets.push_back(current);
      current = Bucket{p.offset, p.offset, {}};
    }
  }
  if (!current.parameters.empty()) buckets.push_back(current);
  if (expected_end != 0 && !params.empty())
    throw ValueError("kiln::parallel::plan_buckets: the parameters start at offset " + std::to_string(expected_end) +
                     ", not 0");
  return buckets;
}

}  // namespace kiln::parallel
