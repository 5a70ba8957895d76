// Helpers of the fuzz targets (tests/fuzz/fuzz_*.cpp): a scratch folder per process, writing the input
// to a file, gzip-compressing it, and a check that stops the process when a reader breaks a promise.
//
// The readers take paths, so each input goes through a real file. The folder is made once per process
// (mkdtemp under $TMPDIR, /tmp by default) and removed when the process exits normally; run-fuzz.sh points
// $TMPDIR into its build folder, so a crashed run leaves nothing in /tmp.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#if KILN_WITH_ZLIB
#include <zlib.h>
#endif

namespace kiln::fuzz {

/// This process's scratch folder, created on first use and removed at exit.
inline const std::filesystem::path& scratch() {
  struct Folder {
    std::filesystem::path path;
    Folder() {
      const char* tmp = std::getenv("TMPDIR");
      std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-fuzz-XXXXXX";
      if (!mkdtemp(pattern.data())) {
        std::perror(("kiln fuzz: mkdtemp " + pattern).c_str());
        std::abort();
      }
      path = pattern;
    }
    ~Folder() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Folder folder;
  return folder.path;
}

/// A fresh, empty folder `name` inside scratch() (emptied if it was there).
inline std::filesystem::path fresh_folder(const std::string& name) {
  const auto dir = scratch() / name;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir);
  return dir;
}

/// Writes `size` bytes to `path` (replacing it); returns the path as a string.
inline std::string write_file(const std::filesystem::path& path, const std::uint8_t* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (size) out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) {
    std::fprintf(stderr, "kiln fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path.string();
}

/// Stops the process (a finding for libFuzzer, a failure for the replay) when a reader returned something
/// that breaks its own contract: `cond` is false.
inline void require(bool cond, const char* what) {
  if (!cond) {
    std::fprintf(stderr, "kiln fuzz: broken invariant: %s\n", what);
    std::abort();
  }
}

#if KILN_WITH_ZLIB
/// `data` as a gzip stream (what `gzip -1` writes).
inline std::vector<std::uint8_t> gzip(const std::uint8_t* data, std::size_t size) {
  z_stream z{};
  require(deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK, "deflateInit2");
  std::vector<std::uint8_t> out(deflateBound(&z, static_cast<uLong>(size)) + 32);
  z.next_in = const_cast<Bytef*>(data);
  z.avail_in = static_cast<uInt>(size);
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  const int status = deflate(&z, Z_FINISH);
  deflateEnd(&z);
  require(status == Z_STREAM_END, "deflate of a fuzz input in one call");
  out.resize(z.total_out);
  return out;
}
#endif

}  // namespace kiln::fuzz
