/// DataError: bad input data, with the file, the position in it and what was expected.
#pragma once
#include <cstdint>
#include <string>

#include "kiln/core/errors.hpp"

namespace kiln::data {

/// A dataset file that cannot be read as what it claims to be. what() reads
/// "<file>: <position>: <problem>; expected <expectation>", e.g.
/// "train-images-idx3-ubyte.gz: byte 0: magic number 0x00000000; expected 0x00000803 (IDX, ubyte, 3 dims)".
class DataError : public Error {
 public:
  DataError(const std::string& file, const std::string& position, const std::string& problem,
            const std::string& expected)
      : Error(file + ": " + position + ": " + problem + (expected.empty() ? "" : "; expected " + expected)),
        file_(file) {}
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

namespace detail {
inline std::string byte_position(std::uint64_t offset) { return "byte " + std::to_string(offset); }
inline std::string line_column(std::uint64_t line, std::uint64_t column) {
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}
}  // namespace detail

}  // namespace kiln::data
