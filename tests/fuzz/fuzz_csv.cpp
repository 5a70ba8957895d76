// libFuzzer target: numeric CSV tables (kiln::data::CsvDataset<Features>). Any input must load or throw a
// kiln::Error; what loads must keep the reader's promises (at least one row, Features finite features
// and one finite target per row, distinct feature names without the target). Built by run-fuzz.sh with
// clang -fsanitize=fuzzer,address,undefined; replayed over tests/fuzz/regressions/csv by CTest
// (replay.cpp).
//
// Each input is loaded as CsvDataset<1>, <3> and <13> (Boston housing's width), with the target "MEDV"
// and with a name cut from the first or second line (the header, after an optional count line).
// GCC 12 at -O2/-O3 warns about std::string's operator+ inlined from csv::shown (-Wrestrict on a
// memcpy of ~2^63 bytes that cannot happen: GCC bug 105329); only this TU inlines it that way.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <kiln/data/csv.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"

namespace {
namespace fz = kiln::fuzz;

/// A column name from the input's header: cell (size % cells) of the second line when the first one has no
/// letter (a count line), else of the first; split at every comma, spaces and one pair of quotes removed.
std::string target_from_header(std::string_view text) {
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  std::string_view line = text.substr(0, text.find('\n'));
  const bool has_letter = std::any_of(line.begin(), line.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '"';
  });
  if (!has_letter && line.size() < text.size()) {
    text.remove_prefix(line.size() + 1);
    line = text.substr(0, text.find('\n'));
  }
  std::vector<std::string_view> cells;
  for (std::size_t start = 0;;) {
    const std::size_t comma = std::min(line.find(',', start), line.size());
    cells.push_back(line.substr(start, comma - start));
    if (comma == line.size()) break;
    start = comma + 1;
  }
  std::string_view cell = cells[text.size() % cells.size()];
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!cell.empty() && space(cell.front())) cell.remove_prefix(1);
  while (!cell.empty() && space(cell.back())) cell.remove_suffix(1);
  if (cell.size() >= 2 && cell.front() == '"' && cell.back() == '"') cell = cell.substr(1, cell.size() - 2);
  return std::string(cell);
}

template <kiln::index_t Features>
void load_and_check(const std::string& path, const std::string& target) {
  try {
    const kiln::data::CsvDataset<Features> table(path, target);
    const auto rows = static_cast<std::size_t>(table.size());
    fz::require(rows > 0, "CsvDataset: at least one row");
    fz::require(table.features().size() == rows * Features, "CsvDataset: Features features per row");
    fz::require(table.targets().size() == rows, "CsvDataset: one target per row");
    fz::require(table.target_name() == target, "CsvDataset: the target is the column asked for");
    const auto& names = table.feature_names();
    fz::require(names.size() == static_cast<std::size_t>(Features), "CsvDataset: one name per feature");
    for (std::size_t j = 0; j < names.size(); ++j) {
      fz::require(!names[j].empty() && names[j] != target, "CsvDataset: feature names are not empty nor the target");
      for (std::size_t k = 0; k < j; ++k) fz::require(names[k] != names[j], "CsvDataset: distinct feature names");
    }
    std::vector<float> x(static_cast<std::size_t>(Features));
    float y = 0;
    for (kiln::index_t i = 0; i < table.size(); ++i) {
      table.read(i, x, std::span<float>(&y, 1));
      fz::require(std::isfinite(y) && y == table.targets()[static_cast<std::size_t>(i)], "CsvDataset: read gives the target");
      for (std::size_t j = 0; j < x.size(); ++j)
        fz::require(std::isfinite(x[j]) && x[j] == table.features()[static_cast<std::size_t>(i) * Features + j],
                    "CsvDataset: read gives the row's finite features");
    }
  } catch (const kiln::Error&) {
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fz::write_file(fz::scratch() / "input.csv", data, size);
  const std::string named = target_from_header(std::string_view(reinterpret_cast<const char*>(data), size));
  for (const std::string& target : {std::string("MEDV"), named}) {
    load_and_check<1>(path, target);
    load_and_check<3>(path, target);
    load_and_check<13>(path, target);
    if (named == "MEDV") break;
  }
  return 0;
}
