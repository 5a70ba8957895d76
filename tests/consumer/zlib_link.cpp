// kiln::zlib from an outside project: writes a gzip-compressed IDX file (2 x 3 bytes) with zlib, reads
// it back through kiln::data::read_idx, and checks every value.
#include <kiln/data/idx.hpp>

#include <zlib.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  const std::string path = std::string(argc > 1 ? argv[1] : ".") + "/consumer.idx2-ubyte.gz";
  const unsigned char file[] = {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 10, 11, 12, 13, 14, 15};
  gzFile f = gzopen(path.c_str(), "wb");
  if (!f || gzwrite(f, file, sizeof file) != static_cast<int>(sizeof file) || gzclose(f) != Z_OK) {
    std::printf("consumer zlib: cannot write %s\n", path.c_str());
    return 1;
  }
  try {
    const auto a = kiln::data::read_idx(path, 2);
    bool ok = a.dims.size() == 2 && a.dims[0] == 2 && a.dims[1] == 3 && a.values.size() == 6;
    for (std::size_t i = 0; ok && i < a.values.size(); ++i) ok = a.values[i] == 10 + i;
    std::printf("consumer zlib: %s\n", ok ? "ok" : "wrong values");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("consumer zlib: %s\n", e.what());
    return 1;
  }
}
