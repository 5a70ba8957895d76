/// Splitting one CSV line into cells and reading a cell as a number (helpers of data/csv.hpp).
#pragma once
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "kiln/core/nan.hpp"
#include "kiln/data/error.hpp"

namespace kiln::data::detail::csv {

/// One cell of a line: its text without surrounding spaces and quotes (spaces just inside the quotes
/// are dropped too; a quoted cell's "" pairs are kept as they are, unquote() turns them into "), the
/// 1-based column of its first character (its opening quote, if quoted), and whether it was quoted.
struct Cell {
  std::string_view text;
  std::size_t column = 1;
  bool quoted = false;
};

inline bool is_space(char c) { return c == ' ' || c == '\t'; }

/// `s` without the spaces and tabs around it.
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

/// Text from the file as a message shows it: control bytes as C escapes (\r, \t, \0, \x1b), which
/// would otherwise end the message (a NUL) or overwrite it on a terminal (a \r); the rest, UTF-8
/// included, as it is.
inline std::string printable(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) out += c;
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c == '\n') out += "\\n";
    else if (c == '\0') out += "\\0";
    else {
      const char* hex = "0123456789abcdef";
      out += std::string("\\x") + hex[u >> 4] + hex[u & 15];
    }
  }
  return out;
}

/// A cell's text for messages: quoted, cut after 40 characters, printable.
inline std::string shown(std::string_view s) {
  return "\"" + printable(s.substr(0, 40)) + (s.size() > 40 ? "...\"" : "\"");
}

/// The text of a quoted cell with each "" pair read as one ".
inline std::string unquote(const Cell& c) {
  if (!c.quoted) return std::string(c.text);
  std::string out;
  out.reserve(c.text.size());
  for (std::size_t i = 0; i < c.text.size(); ++i) {
    out += c.text[i];
    if (c.text[i] == '"') ++i;  // the second quote of a "" pair
  }
  return out;
}

/// Splits `line` (no line ending) at commas into `cells` (cleared first; views into `line`). Spaces
/// around a cell are dropped; a cell may be quoted ("CRIM", "a,b", "say ""hi"""). A line ending in a
/// comma has an empty last cell. Throws DataError on an unterminated quote or text after a closing quote.
inline void split(std::string_view line, const std::string& file, std::size_t line_no,
                  std::vector<Cell>& cells) {
  cells.clear();
  std::size_t i = 0;
  for (;;) {
    while (i < line.size() && is_space(line[i])) ++i;
    Cell cell;
    cell.column = i + 1;
    if (i < line.size() && line[i] == '"') {
      cell.quoted = true;
      const std::size_t open = i++;
      std::size_t close = std::string_view::npos;
      while (i < line.size()) {
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            i += 2;  // "" inside quotes: a literal quote
            continue;
          }
          close = i;
          break;
        }
        ++i;
      }
      if (close == std::string_view::npos)
        throw DataError(file, detail::line_column(line_no, open + 1),
                        "a quoted cell is not closed on its line", "a closing \" before the end of the line");
      cell.text = trim(line.substr(open + 1, close - open - 1));
      i = close + 1;
      while (i < line.size() && is_space(line[i])) ++i;
      if (i < line.size() && line[i] != ',')
        throw DataError(file, detail::line_column(line_no, i + 1),
                        "text " + shown(line.substr(i, line.find(',', i) - i)) + " after the closing quote",
                        "a comma or the end of the line after a quoted cell");
    } else {
      const std::size_t end = std::min(line.find(',', i), line.size());
      cell.text = trim(line.substr(i, end - i));
      i = end;
    }
    cells.push_back(cell);
    if (i >= line.size()) return;
    ++i;  // the comma
  }
}

/// Whether `s` is a non-negative integer written in decimal digits only ("506", "13").
inline bool is_count(std::string_view s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

/// Whether a number std::from_chars found out of a double's range is too large (else too close to 0):
/// the range spans about 1e-324 to 1.8e308, so the sign of its power of ten decides.
inline bool beyond_double_max(std::string_view s) {
  const std::size_t e = std::min(s.find_first_of("eE"), s.size());
  const std::string_view digits = s.substr(0, e);
  const std::size_t point = std::min(digits.find('.'), digits.size());
  const std::size_t first = digits.find_first_of("123456789");  // there is one: 0 is in range
  // The power of ten of the first significant digit, before the exponent: "123.4" 2, "0.001" -3.
  const long long lead =
      first < point ? static_cast<long long>(point - first - 1) : -static_cast<long long>(first - point);
  if (e == s.size()) return lead > 0;
  std::string_view exponent = s.substr(e + 1);
  if (exponent.front() == '+') exponent.remove_prefix(1);
  long long x = 0;
  if (std::from_chars(exponent.data(), exponent.data() + exponent.size(), x).ec != std::errc())
    return exponent.front() != '-';  // an exponent beyond 2^63
  return x > -lead;
}

/// Reads all of `s` as a number into `value` (std::from_chars in double precision, after an optional
/// leading '+'); false when `s` is empty or not entirely a number. Accepts what Python's float() prints and
/// pandas writes: 0.00632, 18, -1.5e-3. A number beyond a double's range rounds as Python's float() rounds
/// it: to infinity (1e400) or to 0 of its sign (1e-400).
inline bool parse_number(std::string_view s, double& value) {
  if (s.size() > 1 && s.front() == '+' && s[1] != '-' && s[1] != '+') s.remove_prefix(1);
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value, std::chars_format::general);
  if (end != s.data() + s.size()) return false;
  if (ec == std::errc::result_out_of_range) {  // from_chars leaves `value` as it was
    value = std::copysign(beyond_double_max(s) ? HUGE_VAL : 0.0, s.front() == '-' ? -1.0 : 1.0);
    return true;
  }
  return ec == std::errc();
}

/// Whether `s` reads as a number (finite or not): used to tell a header row from a data row.
inline bool looks_numeric(std::string_view s) {
  double v = 0;
  return parse_number(s, v);
}

/// Cell `c` of `line_no` as a finite float, or DataError naming the cell and its column `name`.
inline float to_float(const Cell& c, const std::string& name, const std::string& file, std::size_t line_no) {
  const auto where = detail::line_column(line_no, c.column);
  const std::string what = "the cell of column \"" + name + "\"";
  if (c.text.empty())
    throw DataError(file, where, what + " is empty (a missing value)",
                    "a number: kiln does not impute missing values");
  double v = 0;
  if (!parse_number(c.text, v))
    throw DataError(file, where, what + " is " + shown(c.text) + ", not a number",
                    "a decimal number such as 0.538, -12 or 1.5e-3");
  const std::string expected = "a finite number of magnitude at most 3.4e38";
  // (bit tests: -ffast-math folds std::isnan and std::isinf to false, and "nan" would read)
  if (kiln::detail::is_nan(v) ||
      (kiln::detail::is_inf_or_nan(v) && c.text.find_first_of("0123456789") == std::string_view::npos))
    throw DataError(file, where, what + " is " + shown(c.text) + ", not a finite float", expected);
  // Below 2^128 - 2^103 a number rounds to a finite float (numpy prints float32's largest as
  // 3.4028235e+38, a little above FLT_MAX, which reads back as FLT_MAX); from there on to infinity. One
  // too close to 0 rounds to 0 of its sign, as numpy.float32 rounds it.
  if (!(std::abs(v) < 0x1.ffffffp127))
    throw DataError(file, where,
                    what + " is " + shown(c.text) + ", out of range for a float (magnitude above 3.4e38)",
                    expected);
  return static_cast<float>(v);
}

}  // namespace kiln::data::detail::csv
