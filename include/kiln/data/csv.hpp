/// CsvDataset: a numeric CSV table with a header row, in memory; one named column is the target.
#pragma once
#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/index.hpp"
#include "kiln/data/dataset.hpp"
#include "kiln/data/detail/csv_line.hpp"
#include "kiln/data/error.hpp"
#include "kiln/data/standardize.hpp"
#include "kiln/tensor/shape.hpp"

namespace kiln::data {

namespace detail::csv {
/// A line of the file that is not blank, without its line ending, and its 1-based line number.
struct Line {
  std::string_view text;
  std::size_t number = 0;
};

/// Line and column (1-based) of byte `at` of `text`.
inline std::string position_of(std::string_view text, std::size_t at) {
  const std::string_view before = text.substr(0, at);
  const std::size_t line_start = before.rfind('\n');
  const std::size_t column = line_start == std::string_view::npos ? at + 1 : at - line_start;
  return detail::line_column(1 + static_cast<std::size_t>(std::count(before.begin(), before.end(), '\n')), column);
}

/// Refuses what is no UTF-8 (or ASCII) text with lines ending in \n or \r\n, saying what it looks like:
/// UTF-16 (Excel's "Unicode Text"), a NUL byte (binary data), lines that end in a lone \r (classic Mac
/// OS, Excel's "CSV (Macintosh)"), which would otherwise read as one long line.
inline void require_text(const std::string& path, std::string_view text) {
  const std::string expected = "UTF-8 text, lines ending in \\n or \\r\\n";
  if (text.substr(0, 2) == "\xFF\xFE" || text.substr(0, 2) == "\xFE\xFF")
    throw DataError(path, detail::line_column(1, 1), "UTF-16 text (it starts with a UTF-16 byte order mark)",
                    expected + " (save the file as \"CSV UTF-8\", or iconv -f UTF-16 -t UTF-8)");
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos)
    throw DataError(path, position_of(text, nul), "a NUL byte (UTF-16 text, or a binary file?)", expected);
  for (std::size_t r = text.find('\r'); r != std::string_view::npos; r = text.find('\r', r + 1)) {
    std::size_t after = r;
    while (after < text.size() && text[after] == '\r') ++after;  // \r\r\n: a text-mode writer's \r\n
    if (after < text.size() && text[after] != '\n')
      throw DataError(path, position_of(text, r),
                      "a carriage return (\\r) that ends no line: lines that end in a lone \\r (classic Mac OS "
                      "line endings)?",
                      expected + " (tr '\\r' '\\n' < old.csv > new.csv)");
    r = after;
  }
}

/// The whole file; DataError when it is missing, a directory or unreadable.
inline std::string read_text(const std::string& path) {
  namespace fs = std::filesystem;
  const auto where = detail::line_column(1, 1);
  const std::string expected =
      "a readable CSV file: a header row of column names, then one row of numbers per sample";
  if (path.empty()) throw DataError("\"\"", where, "the path is empty", expected);
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status)) throw DataError(path, where, "the file does not exist", expected);
  if (fs::is_directory(status)) throw DataError(path, where, "this is a directory, not a file", expected);
  if (!fs::is_regular_file(status))  // a pipe or a device: its size cannot be known (copy it to a file)
    throw DataError(path, where, "not a regular file (a pipe or a device?)", expected);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path, where, "cannot open the file (permissions?)", expected);
  std::string text;
  in.seekg(0, std::ios::end);
  const auto size = in.tellg();
  in.seekg(0);
  if (size > 0) {
    text.resize(static_cast<std::size_t>(size));
    if (!in.read(text.data(), static_cast<std::streamsize>(size)))
      throw DataError(path, where, "reading the file failed", expected);
  }
  require_text(path, text);
  return text;
}

/// The non-blank lines of `text` (a leading UTF-8 byte order mark, a trailing \r and lines of only spaces
/// dropped), each with its line number in the file.
inline std::vector<Line> lines(std::string_view text) {
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  std::vector<Line> out;
  std::size_t number = 0;
  while (!text.empty()) {
    const std::size_t end = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    ++number;
    while (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // \r\n, and \r\r\n from text-mode writers
    if (!trim(line).empty()) out.push_back({line, number});
  }
  return out;
}

/// scikit-learn's count line ("506,13,,,,,,,,,,,," in boston_house_prices.csv): two integers, then only
/// empty cells.
inline bool is_count_line(const std::vector<Cell>& cells) {
  if (cells.size() < 2 || cells[0].quoted || cells[1].quoted || !is_count(cells[0].text) ||
      !is_count(cells[1].text))
    return false;
  return std::all_of(cells.begin() + 2, cells.end(), [](const Cell& c) { return c.text.empty(); });
}

/// A header names its columns: at least one cell is neither empty nor a number.
inline bool is_header(const std::vector<Cell>& cells) {
  return std::any_of(cells.begin(), cells.end(),
                     [](const Cell& c) { return !c.text.empty() && !looks_numeric(c.text); });
}

inline std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "\"" : ", \"") + printable(n) + "\"";
  return s;
}
}  // namespace detail::csv

/// A numeric table from a CSV file with a header row, held in memory (N rows of `Features` features and
/// one target), for regression: `sample_shape = Shape<Features>`, `target_type = float`,
/// `target_shape = Shape<1>`.
///
/// The file: an optional count line (scikit-learn's "506,13": two integers, the second the number of
/// feature columns, then only empty cells; recognised when the next line is a header, and its row count
/// is checked), then a header row of column names, then one row of numbers per sample. The column named
/// `target` is the target; every other column is a feature, in file order, and there must be `Features`
/// of them. Names may be quoted ("CRIM"); cells may have spaces around them; lines may end in \r\n;
/// blank lines (and a final newline, or none) are skipped; numbers are read with std::from_chars
/// (0.00632, 18, -1.5e-3, +2), must be finite and fit a float (one too close to 0, 1e-50 or 1e-400,
/// reads as 0 of its sign, as numpy.float32(float(cell)) does). Anything else throws DataError with the
/// file, the line and column (1-based) and what was expected: a missing or empty file, no header row, a
/// cell that is not a number, a row with more or fewer cells than the header, a target name not in the
/// header, a number of features other than `Features`.
///
/// Example (Boston housing, as scikit-learn ships it):
/// ```cpp
/// kiln::data::CsvDataset<13> boston("boston_house_prices.csv", "MEDV");  // 506 samples, [13] -> [1]
/// ```
template <index_t Features>
class CsvDataset {
  // >>> Stopped here? CsvDataset's argument is the number of feature columns (all columns but the target).
  // <<<
  static_assert(Features > 0,
                "kiln::data::CsvDataset<Features>: Features is the number of feature columns (every "
                "column but the target), a positive number: CsvDataset<13> for Boston housing; "
                "kiln::dyn is not supported");

 public:
  using sample_shape = Shape<Features>;
  using target_type = float;
  using target_shape = Shape<1>;
  static constexpr index_t feature_count = Features;

  /// Loads `path`; the column named `target` (as the header spells it, without quotes) is the target.
  explicit CsvDataset(const std::string& path, const std::string& target = "MEDV")
      : path_(path), target_name_(target) {
    namespace csv = detail::csv;
    const std::string text = csv::read_text(path);
    const std::vector<csv::Line> lines = csv::lines(text);
    if (lines.empty())
      throw DataError(path, detail::line_column(1, 1),
                      text.empty() ? "the file is empty" : "the file holds only blank lines",
                      "a header row of column names, then one row of numbers per sample");

    // An optional count line, then the header.
    std::vector<csv::Cell> cells, header;
    std::size_t next = 0;
    csv::split(lines[0].text, path, lines[0].number, header);
    ++next;
    bool counted = false;
    index_t declared_rows = 0, declared_features = 0;
    if (csv::is_count_line(header)) {
      if (lines.size() < 2)
        throw DataError(path, detail::line_column(lines[0].number, 1),
                        "the file ends after the count line " + csv::shown(lines[0].text),
                        "a header row of column names after it");
      csv::split(lines[1].text, path, lines[1].number, cells);
      if (csv::is_header(cells)) {
        counted = true;
        declared_rows = std::stoll(std::string(header[0].text));
        declared_features = std::stoll(std::string(header[1].text));
        header.swap(cells);
        ++next;
      }
    }
    const csv::Line& head = lines[next - 1];
    if (!csv::is_header(header))
      throw DataError(path, detail::line_column(head.number, 1),
                      "no header row: " + csv::shown(head.text) + " holds only numbers",
                      "a header row of column names first, such as \"CRIM\",\"ZN\",...,\"MEDV\"");

    std::vector<std::string> names;
    for (const csv::Cell& c : header) {
      names.push_back(csv::unquote(c));
      if (names.back().empty())
        throw DataError(path, detail::line_column(head.number, c.column),
                        "header column " + std::to_string(names.size()) + " has no name",
                        "a name for every column");
      for (std::size_t k = 0; k + 1 < names.size(); ++k)
        if (names[k] == names.back())
          throw DataError(path, detail::line_column(head.number, c.column),
                          "the column name \"" + names.back() + "\" appears twice (columns " +
                              std::to_string(k + 1) + " and " + std::to_string(names.size()) + ")",
                          "distinct column names");
    }
    const auto target_at = std::find(names.begin(), names.end(), target);
    if (target_at == names.end())
      throw DataError(path, detail::line_column(head.number, 1),
                      "no column named \"" + target + "\" for the target",
                      "one of the header's columns: " + csv::joined(names));
    const auto target_column = static_cast<std::size_t>(target_at - names.begin());
    const auto found = static_cast<index_t>(names.size()) - 1;
    if (counted && declared_features != found)
      throw DataError(path, detail::line_column(lines[0].number, 1),
                      "the count line " + csv::shown(lines[0].text) + " says " +
                          std::to_string(declared_features) + " feature columns, but the header on line " +
                          std::to_string(head.number) + " has " + std::to_string(names.size()) +
                          " columns (" + std::to_string(found) + " besides the target)",
                      "a count line \"<rows>," + std::to_string(found) + "\" that matches the header");
    if (found != Features)
      throw DataError(path, detail::line_column(head.number, 1),
                      "the header has " + std::to_string(names.size()) + " columns: " +
                          std::to_string(found) + " feature columns besides the target \"" + target + "\"",
                      std::to_string(Features) + " feature columns (CsvDataset<" + std::to_string(Features) +
                          ">); for this file use CsvDataset<" + std::to_string(found) + ">");
    for (std::size_t j = 0; j < names.size(); ++j)
      if (j != target_column) feature_names_.push_back(names[j]);

    // The rows.
    features_.reserve((lines.size() - next) * static_cast<std::size_t>(Features));
    targets_.reserve(lines.size() - next);
    for (std::size_t l = next; l < lines.size(); ++l) {
      const csv::Line& line = lines[l];
      csv::split(line.text, path, line.number, cells);
      if (cells.size() != names.size()) {
        const std::size_t column =
            cells.size() < names.size() ? line.text.size() + 1 : cells[names.size()].column;
        throw DataError(path, detail::line_column(line.number, column),
                        "the row has " + std::to_string(cells.size()) + " cells",
                        std::to_string(names.size()) + " cells, one per column of the header on line " +
                            std::to_string(head.number));
      }
      for (std::size_t j = 0; j < cells.size(); ++j) {
        const float v = csv::to_float(cells[j], names[j], path, line.number);
        if (j == target_column)
          targets_.push_back(v);
        else
          features_.push_back(v);
      }
    }
    if (targets_.empty())
      throw DataError(path, detail::line_column(head.number + 1, 1), "the file has a header but no rows",
                      "at least one row of numbers after the header");
    if (counted && declared_rows != size())
      throw DataError(path, detail::line_column(lines[0].number, 1),
                      "the count line " + csv::shown(lines[0].text) + " says " +
                          std::to_string(declared_rows) + " rows, but the file has " + std::to_string(size()),
                      std::to_string(declared_rows) + " rows after the header (is the file cut short?)");
  }

  /// The number of samples (rows after the header).
  index_t size() const { return static_cast<index_t>(targets_.size()); }
  /// Writes row i's features into x (Features values) and its target into y (1 value); i in [0, size()).
  void read(index_t i, std::span<float> x, std::span<float> y) const {
    detail::check_read("kiln::data::CsvDataset::read", i, size(), x.size(), Features, y.size(), 1);
    const auto row = static_cast<std::size_t>(i);
    std::copy_n(features_.begin() + static_cast<std::ptrdiff_t>(row * Features), Features, x.begin());
    y[0] = targets_[row];
  }

  /// The file it was loaded from.
  const std::string& path() const { return path_; }
  /// The names of the feature columns, in file order (the header without the target).
  const std::vector<std::string>& feature_names() const { return feature_names_; }
  /// The name of the target column.
  const std::string& target_name() const { return target_name_; }
  /// All features, row-major: size() x Features.
  const std::vector<float>& features() const { return features_; }
  /// All targets: size() values.
  const std::vector<float>& targets() const { return targets_; }

  /// Applies `scaler` (fitted on the training rows, with Features features) to every row's features in
  /// place; targets are unchanged. Subsets and splits of this dataset see the new values. Each call applies
  /// the map again: call it once.
  void standardize(const Standardizer& scaler) {
    if (scaler.fitted() && scaler.features() != Features)
      throw ValueError("kiln::data::CsvDataset::standardize: the standardizer was fitted on " +
                       std::to_string(scaler.features()) + " features, the dataset has " +
                       std::to_string(Features) +
                       "; fit it on this dataset's rows (Standardizer::fit(training split))");
    scaler.transform(features_);
  }

 private:
  std::string path_;
  std::string target_name_;
  std::vector<std::string> feature_names_;
  std::vector<float> features_;
  std::vector<float> targets_;
};

}  // namespace kiln::data
