/// Printing a tensor as torch 1.13 prints it: `std::cout << x` writes `tensor([1.5000, 2.2500])`.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/half.hpp"
#include "kiln/core/nan.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln {

/// torch.set_printoptions' fields, with its defaults. sci_mode unset: chosen per tensor (torch's None).
struct PrintOptions {
  int precision = 4;         ///< digits after the point
  index_t threshold = 1000;  ///< more elements than this are summarised
  index_t edgeitems = 3;     ///< items shown at each end of a summarised dimension
  int linewidth = 80;        ///< characters per line before a row wraps
  std::optional<bool> sci_mode = std::nullopt;  ///< true or false: always or never scientific
};

namespace detail {
struct PrintOptionsCell {
  std::mutex m;
  PrintOptions o;
};
inline PrintOptionsCell& print_options_cell() {
  static PrintOptionsCell cell;
  return cell;
}
}  // namespace detail

/// The options every later print uses, for the whole program (torch.set_printoptions); returns the
/// ones it replaces. Unlike torch's keywords, a field not given is its default, not left as it was:
/// `auto old = kiln::set_printoptions({.precision = 2}); ...; kiln::set_printoptions(old);`. A
/// precision outside [0, 30], a negative threshold or edgeitems, or a linewidth below 1 is a ValueError.
inline PrintOptions set_printoptions(const PrintOptions& o) {
  if (o.precision < 0 || o.precision > 30 || o.threshold < 0 || o.edgeitems < 0 || o.linewidth < 1)
    throw ValueError("kiln::set_printoptions: precision " + std::to_string(o.precision) + ", threshold " +
                     std::to_string(o.threshold) + ", edgeitems " + std::to_string(o.edgeitems) + ", linewidth " +
                     std::to_string(o.linewidth) + "; expected a precision in [0, 30], a threshold and "
                     "edgeitems >= 0, a linewidth >= 1");
  auto& cell = detail::print_options_cell();
  const std::lock_guard lock(cell.m);
  PrintOptions old = cell.o;
  cell.o = o;
  return old;
}
/// The options prints use now.
inline PrintOptions printoptions() {
  auto& cell = detail::print_options_cell();
  const std::lock_guard lock(cell.m);
  return cell.o;
}

namespace detail {

/// A tensor's values on the host, as torch's printer reads them: floating types as double (half and
/// bfloat16 through float, as torch's `self.float()`), integers as int64, bools as 0 / 1.
struct PrintValues {
  std::vector<double> real;           ///< floating tensors
  std::vector<std::int64_t> integer;  ///< integer and bool tensors
  std::vector<index_t> extents;
  bool floating = true;
  bool boolean = false;
};

/// torch._tensor_str under the print options `o`.
class TensorPrinter {
 public:
  TensorPrinter(const PrintValues& v, const PrintOptions& o)
      : v_(v), threshold_(o.threshold), edge_items_(o.edgeitems), line_width_(o.linewidth), precision_(o.precision) {
    const std::size_t rank = v.extents.size();
    strides_.assign(rank, 1);
    index_t numel = 1;
    for (std::size_t d = rank; d-- > 0;) {
      strides_[d] = numel;
      numel *= v.extents[d];
    }
    summarize_ = numel > threshold_;
    std::vector<index_t> kept;  // the flat indices printed: torch's get_summarized_data
    collect(0, 0, kept);
    measure(kept);
  }

  /// The bracketed values (no `tensor(` prefix); `indent` is the prefix's length.
  std::string body(int indent) const { return v_.extents.empty() ? element(0) : tensor_str(0, 0, indent); }
  /// A sci_mode the options force, once the widths are measured in the mode chosen (as torch does);
  /// not where no value is finite and nonzero (torch's _Formatter returns before it looks: `[0., nan, inf]`).
  void force_sci_mode(std::optional<bool> sci) {
    if (sci && measured_) sci_mode_ = *sci;
  }

 private:
  /// Indices along dimension d that are shown: all, or the first and last edge items with `...` between.
  bool elided(std::size_t d) const { return summarize_ && v_.extents[d] > 2 * edge_items_; }
  template <class F>
  void for_shown(std::size_t d, F f) const {
    const index_t n = v_.extents[d];
    for (index_t i = 0; i != n; ++i) {
      if (elided(d) && i == edge_items_) {
        f(index_t{-1});  // the `...`
        i = n - edge_items_ - 1;
        continue;
      }
      f(i);
    }
  }
  void collect(std::size_t d, index_t offset, std::vector<index_t>& out) const {
    if (d == v_.extents.size()) {
      out.push_back(offset);
      return;
    }
    for_shown(d, [&](index_t i) {
      if (i >= 0) collect(d + 1, offset + i * strides_[d], out);
    });
  }

  /// torch's _Formatter: integer-valued floats as `1.`, else 4 decimals, scientific when the nonzero
  /// finite magnitudes span more than 1000x, exceed 1e8 or (not integer-valued) go below 1e-4.
  void measure(const std::vector<index_t>& kept) {
    if (!v_.floating) {
      for (index_t i : kept) width_ = std::max(width_, raw(i).size());
      return;
    }
    double lo = 0, hi = 0;
    bool any = false;
    for (index_t i : kept) {
      const double x = v_.real[static_cast<std::size_t>(i)];
      if (is_inf_or_nan(x) || x == 0) continue;
      lo = any ? std::min(lo, std::abs(x)) : std::abs(x);
      hi = any ? std::max(hi, std::abs(x)) : std::abs(x);
      any = true;
      if (x != std::ceil(x)) int_mode_ = false;
    }
    if (!any) return;
    measured_ = true;
    sci_mode_ = hi / lo > 1000.0 || hi > 1.0e8 || (!int_mode_ && lo < 1.0e-4);
    for (index_t i : kept) {
      const double x = v_.real[static_cast<std::size_t>(i)];
      if (is_inf_or_nan(x) || x == 0) continue;
      width_ = std::max(width_, raw(i).size());  // with the `.` of an integer-valued float
    }
  }
  /// Element i as Python formats it, unpadded.
  std::string raw(index_t i) const {
    if (!v_.floating) {
      const std::int64_t x = v_.integer[static_cast<std::size_t>(i)];
      return v_.boolean ? (x ? "True" : "False") : std::to_string(x);
    }
    const double x = v_.real[static_cast<std::size_t>(i)];
    if (is_nan(x)) return "nan";
    if (is_inf_or_nan(x)) return x < 0 ? "-inf" : "inf";
    char buf[400];  // "%.30f" of 1.8e308: 309 digits, the point and 30 more
    std::snprintf(buf, sizeof buf, sci_mode_ ? "%.*e" : "%.*f", sci_mode_ || !int_mode_ ? precision_ : 0, x);
    std::string s = buf;
    if (int_mode_ && !sci_mode_) s += '.';
    return s;
  }
  std::string element(index_t i) const {
    std::string s = raw(i);
    return s.size() < width_ ? std::string(width_ - s.size(), ' ') + s : s;
  }

  std::string tensor_str(std::size_t d, index_t offset, int indent) const {
    std::vector<std::string> parts;
    const bool last = d + 1 == v_.extents.size();
    for_shown(d, [&](index_t i) {
      if (i < 0)
        parts.push_back(last ? " ..." : "...");
      else if (last)
        parts.push_back(element(offset + i * strides_[d]));
      else
        parts.push_back(tensor_str(d + 1, offset + i * strides_[d], indent + 1));
    });
    std::string out = "[";
    if (last) {  // _vector_str: as many elements per line as fit in the line width
      const std::size_t per_line =
          static_cast<std::size_t>(std::max(1, (line_width_ - indent) / static_cast<int>(width_ + 2)));
      for (std::size_t k = 0; k != parts.size(); ++k) {
        if (k) out += k % per_line ? ", " : ",\n" + std::string(static_cast<std::size_t>(indent) + 1, ' ');
        out += parts[k];
      }
    } else {  // a blank line between matrices, two between blocks of them, ...
      const std::string sep = "," + std::string(v_.extents.size() - d - 1, '\n') +
                              std::string(static_cast<std::size_t>(indent) + 1, ' ');
      for (std::size_t k = 0; k != parts.size(); ++k) out += (k ? sep : "") + parts[k];
    }
    return out + "]";
  }

  const PrintValues& v_;
  const index_t threshold_, edge_items_;
  const int line_width_, precision_;
  std::vector<index_t> strides_;
  bool summarize_ = false, int_mode_ = true, sci_mode_ = false;
  bool measured_ = false;  // a finite nonzero value was seen: the formats were chosen from the values
  std::size_t width_ = 1;
};

/// `tensor(...)` with torch's suffixes: the device, the size of an empty tensor, a dtype other than
/// float32, int64 and bool (any dtype but float32 when empty); a suffix that would pass column 80
/// starts a line.
inline std::string format_tensor(const PrintValues& v, std::string_view dtype, int cuda_device,
                                 const PrintOptions& o = printoptions()) {
  constexpr int indent = 7;  // "tensor("
  std::string s = "tensor(";
  std::vector<std::string> suffixes;
  if (cuda_device >= 0) suffixes.push_back("device='cuda:" + std::to_string(cuda_device) + "'");
  index_t numel = 1;
  for (index_t e : v.extents) numel *= e;
  const std::string dtype_suffix = "dtype=torch." + std::string(dtype);
  if (numel == 0) {
    s += "[]";
    if (v.extents.size() != 1) {
      std::string size = "size=(";
      for (std::size_t d = 0; d != v.extents.size(); ++d)
        size += (d ? ", " : "") + std::to_string(v.extents[d]);
      suffixes.push_back(size + ")");
    }
    if (dtype != "float32") suffixes.push_back(dtype_suffix);
  } else {
    TensorPrinter printer(v, o);
    printer.force_sci_mode(o.sci_mode);
    s += printer.body(indent);
    if (dtype != "float32" && dtype != "int64" && dtype != "bool") suffixes.push_back(dtype_suffix);
  }
  const std::size_t nl = s.rfind('\n');
  // torch's _add_suffixes, with its count: without a newline the line counts two more than it holds
  std::size_t last_line = nl == std::string::npos ? s.size() + 2 : s.size() - nl + 1;
  for (const std::string& suffix : suffixes) {
    if (last_line + suffix.size() + 2 > static_cast<std::size_t>(o.linewidth)) {
      s += ",\n" + std::string(indent, ' ') + suffix;
      last_line = indent + suffix.size();
    } else {
      s += ", " + suffix;
      last_line += suffix.size() + 2;
    }
  }
  return s + ")";
}

}  // namespace detail

/// The tensor as torch 1.13 prints it (`print(x)`, `repr(x)`): `tensor([1.5000, 2.2500])`,
/// `tensor([1, 2], dtype=torch.int32)`, `tensor([1., 2.], device='cuda:0')`. More than 1000 elements
/// are summarised (3 items at each end of every dimension, `...` between). A GPU tensor is copied to
/// the host first (`to_vector()`); the stream is synchronised by that copy.
template <class T, class S, class D>
std::string to_string(const Tensor<T, S, D>& t) {
  detail::PrintValues v;
  for (std::size_t d = 0; d != S::rank; ++d) v.extents.push_back(t.extents()[d]);
  v.floating = std::is_floating_point_v<compute_t<T>>;
  v.boolean = std::is_same_v<T, bool>;
  if (t.numel() > 0) {
    const auto host = t.to_vector();
    for (const T x : host) {
      if constexpr (std::is_floating_point_v<compute_t<T>>)
        v.real.push_back(static_cast<double>(to_compute(x)));
      else
        v.integer.push_back(static_cast<std::int64_t>(x));
    }
  }
  return detail::format_tensor(v, dtype_name<T>(), D::is_cuda ? t.device_index() : -1);
}

/// Writes to_string(t): `std::cout << x << '\n';` prints as torch's `print(x)`.
template <class T, class S, class D>
std::ostream& operator<<(std::ostream& os, const Tensor<T, S, D>& t) {
  return os << to_string(t);
}

}  // namespace kiln
