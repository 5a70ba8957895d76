/// IDX files (MNIST, Fashion-MNIST): `read_idx` loads one, plain or gzip-compressed (through zlib).
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/index.hpp"
#include "kiln/data/error.hpp"

#if KILN_WITH_ZLIB
#include <zlib.h>
#endif

namespace kiln::data {

/// An IDX array of unsigned bytes: its dimensions and its values, row-major.
struct IdxArray {
  std::vector<index_t> dims;
  std::vector<std::uint8_t> values;
  index_t count() const { return dims.empty() ? 0 : dims[0]; }
};

namespace detail {
inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Refuses a path that is no regular file before anything opens it (a folder opens as a stream whose end
/// is far away; gzopen on a pipe waits for a writer forever): DataError saying what is there instead.
inline void require_regular_file(const std::string& path, const std::string& expected) {
  namespace fs = std::filesystem;
  if (path.empty()) throw DataError("\"\"", "byte 0", "the path is empty", expected);
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (status.type() == fs::file_type::not_found) throw DataError(path, "byte 0", "no such file", expected);
  if (fs::exists(status) && !fs::is_regular_file(status))
    throw DataError(path, "byte 0",
                    fs::is_directory(status) ? "a directory, not a file" : "not a regular file (a pipe or a device?)",
                    expected);
}

/// The whole file, decompressed when it ends in .gz. Positions in later errors count decompressed bytes.
/// `needed(bytes)`: how many bytes the reader can use, given those read so far (SIZE_MAX while it cannot
/// tell); decompression stops past that, and `*cut` says it did, so that a small .gz whose header says
/// 784 bytes and whose stream inflates to gigabytes (a "zip bomb") costs no more memory than it says.
template <class Needed>
std::vector<std::uint8_t> read_file_bytes(const std::string& path, Needed needed, bool* cut) {
  std::vector<std::uint8_t> bytes;
  *cut = false;
  if (ends_with(path, ".gz")) {
#if KILN_WITH_ZLIB
    require_regular_file(path, "a readable gzip file");
    gzFile f = gzopen(path.c_str(), "rb");
    if (!f)
      throw DataError(path, "byte 0", std::string("cannot open the file: ") + std::strerror(errno), "a readable gzip file");
    std::uint8_t buf[1 << 16];
    for (;;) {
      const int n = gzread(f, buf, sizeof buf);
      if (n < 0) {
        int code = 0;
        std::string msg = gzerror(f, &code);
        if (msg.rfind(path + ": ", 0) == 0) msg.erase(0, path.size() + 2);  // zlib's message starts with the path
        // Where inflate stopped in the file (gzoffset: the compressed bytes it used), at or past the bad
        // bytes; a bad checksum is found at the stream's trailer, after the data it covers.
        const auto at = static_cast<long long>(gzoffset(f));
        gzclose(f);
        if (msg == "incorrect data check" || msg == "incorrect length check")
          msg += " (the checksum at the end of the gzip stream does not match its data: the file is corrupt)";
        throw DataError(path, "at or before byte " + std::to_string(at) + " of the compressed file (" +
                                  std::to_string(bytes.size()) + " bytes decompressed before it)",
                        "gzip error: " + msg, "a complete, uncorrupted gzip stream (download the file again)");
      }
      if (n == 0) break;
      bytes.insert(bytes.end(), buf, buf + n);
      if (bytes.size() > needed(bytes)) {  // (the stream's end unread: gzclose_r's status says nothing here)
        gzclose_r(f);
        *cut = true;
        return bytes;
      }
    }
    // gzread stops quietly at a truncated stream; gzclose_r then reports Z_BUF_ERROR.
    const int status = gzclose_r(f);
    if (status == Z_BUF_ERROR)
      throw DataError(path, "byte " + std::to_string(bytes.size()) + " of the decompressed data",
                      "the gzip stream ends early (truncated file)", "a complete gzip stream");
    if (status != Z_OK)
      throw DataError(path, "end of file", "gzip error " + std::to_string(status), "a complete gzip stream");
#else
    throw DataError(path, "byte 0", "a gzip file, but kiln was built without zlib",
                    "link your target to kiln::zlib (zlib1g-dev; without CMake -DKILN_WITH_ZLIB=1 -lz) or gunzip the file");
#endif
  } else {
    require_regular_file(path, "a readable IDX file");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw DataError(path, "byte 0", "cannot open the file", "a readable file");
    in.seekg(0, std::ios::end);
    const auto end = in.tellg();
    if (end < 0) throw DataError(path, "byte 0", "cannot tell the file's size", "a readable IDX file");
    const auto size = static_cast<std::size_t>(end);
    in.seekg(0);
    bytes.resize(size);
    if (size && !in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size)))
      throw DataError(path, "byte 0", "read failed", std::to_string(size) + " bytes");
  }
  return bytes;
}

inline std::uint32_t big_endian_u32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
}
}  // namespace detail

/// Reads an IDX file of unsigned bytes (type 0x08) with `rank` dimensions: magic 0x0000 08 <rank>,
/// the dimensions as big-endian 32-bit integers, then the values. A file ending in .gz is decompressed.
/// Every mismatch throws DataError with the file, the byte offset and what was expected; a rank outside
/// 0-255 (one byte of the magic number) throws ValueError.
inline IdxArray read_idx(const std::string& path, int rank) {
  if (rank < 0 || rank > 255)  // -1 wrapped the header size; 256 and up ran into the type byte
    throw ValueError("kiln::data::read_idx: rank is " + std::to_string(rank) +
                     "; it must be 0 to 255 (the magic number's last byte)");
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(rank);
  // What the header says the file holds (the product saturating at SIZE_MAX), once it is read.
  const auto needed = [&](const std::vector<std::uint8_t>& b) -> std::size_t {
    if (b.size() < header) return SIZE_MAX;
    std::size_t total = 1;
    for (int d = 0; d < rank; ++d) {
      const std::size_t v = detail::big_endian_u32(b.data() + 4 + 4 * d);
      if (v == 0) return header;
      total = total > (SIZE_MAX - header) / v ? SIZE_MAX - header : total * v;
    }
    return header + total;
  };
  bool cut = false;
  const auto bytes = detail::read_file_bytes(path, needed, &cut);
  if (bytes.empty()) throw DataError(path, "byte 0", "the file is empty", "an IDX header of " + std::to_string(header) + " bytes");
  if (bytes.size() < 4)
    throw DataError(path, "byte " + std::to_string(bytes.size()), "the file ends inside the magic number",
                    "4 bytes of magic number");
  const std::uint32_t magic = detail::big_endian_u32(bytes.data());
  const std::uint32_t want = 0x00000800u | static_cast<std::uint32_t>(rank);
  if (magic != want) {
    char got[16], exp[16];
    std::snprintf(got, sizeof got, "0x%08X", magic);
    std::snprintf(exp, sizeof exp, "0x%08X", want);
    // gzip's magic bytes 1F 8B: compressed data in a file not named .gz, or a .gz compressed twice.
    const bool gzip = bytes[0] == 0x1F && bytes[1] == 0x8B;
    throw DataError(path, "byte 0",
                    std::string("magic number ") + got +
                        (!gzip ? ""
                               : detail::ends_with(path, ".gz") ? " (gzip data inside the gzip file: compressed twice)"
                                                                 : " (gzip-compressed data)"),
                    std::string(exp) + " (IDX, unsigned bytes, " + std::to_string(rank) + " dimensions)" +
                        (!gzip ? ""
                               : detail::ends_with(path, ".gz") ? "; decompress it once more: gunzip it, then add .gz to the result's name"
                                                                 : "; name the file " + path + ".gz, or gunzip it"));
  }
  if (bytes.size() < header)
    throw DataError(path, "byte " + std::to_string(bytes.size()), "the file ends inside the header",
                    std::to_string(header) + " header bytes");
  IdxArray a;
  const std::size_t data = bytes.size() - header;
  // The product of the dimensions, checked for overflow: 2^30 x 2^30 x 2^4 is 2^64, 0 in 64 bits, and
  // would pass for an empty data section. Past 2^64 it stays at the maximum (no file is that long) and
  // the message prints it from `product`.
  std::size_t total = 1;
  bool zero = false, overflow = false;
  long double product = 1;
  for (int d = 0; d < rank; ++d) {
    const std::uint32_t v = detail::big_endian_u32(bytes.data() + 4 + 4 * d);
    if (v > (1u << 30))
      throw DataError(path, "byte " + std::to_string(4 + 4 * d), "dimension " + std::to_string(d) + " is " + std::to_string(v),
                      "at most 2^30");
    a.dims.push_back(static_cast<index_t>(v));
    product *= v;
    if (v == 0) {
      zero = true;
    } else if (overflow || total > SIZE_MAX / v) {
      total = SIZE_MAX;
      overflow = true;
    } else {
      total *= v;
    }
  }
  if (zero) total = 0;
  if (data != total) {
    char claimed[32];
    std::snprintf(claimed, sizeof claimed, "%.6Lg", product);
    std::string dims;
    for (std::size_t d = 0; d < a.dims.size(); ++d) dims += (d ? " x " : "") + std::to_string(a.dims[d]);
    // Truncated: where the file ends; too long: where the first extra byte is.
    throw DataError(path, "byte " + std::to_string(data < total ? bytes.size() : header + total),
                    (data < total ? "the data ends early (truncated file): " : "extra bytes: ") +
                        (cut ? "more than " + std::to_string(total) : std::to_string(data)) + " data bytes",
                    (overflow && !zero ? std::string(claimed) : std::to_string(total)) + " data bytes for dimensions " + dims);
  }
  a.values.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return a;
}

}  // namespace kiln::data
