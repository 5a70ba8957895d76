// make_cifar10_fixture: writes a tiny, fake CIFAR-10 in the binary version's format, for the smoke test of
// lenet_cifar10 (CI and the build machines have no internet, so the real data cannot be fetched there).
//
//   make_cifar10_fixture DIR [--train-per-file N] [--test N] [--seed S]
//
// DIR gets data_batch_1.bin ... data_batch_5.bin (N images each, default 128) and test_batch.bin (default
// 100 images): runs of 3073-byte records, 1 label byte (0-9), then 1024 red, 1024 green and 1024 blue bytes
// (32 x 32, row-major), exactly as https://www.cs.toronto.edu/~kriz/cifar.html describes. Labels cycle
// through the 10 classes; each class has its own mean colour (below) and every pixel gets independent
// uniform noise of +-64 per channel, so the class is learnable from colour alone and a few epochs of LeNet
// beat chance (10 %) by far. The same seed gives the same bytes. Exit status 0 (--help too), 1 with a
// one-line error, 2 for bad arguments.
#include <array>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <system_error>
#include <vector>

namespace {

constexpr int plane = 32 * 32;
constexpr int record_bytes = 1 + 3 * plane;
constexpr int noise = 64;

// Mean colour (R, G, B) of each class.
constexpr std::array<std::array<int, 3>, 10> palette{{{200, 40, 40},
                                                      {40, 200, 40},
                                                      {40, 40, 200},
                                                      {200, 200, 40},
                                                      {200, 40, 200},
                                                      {40, 200, 200},
                                                      {225, 225, 225},
                                                      {30, 30, 30},
                                                      {128, 128, 128},
                                                      {225, 128, 30}}};

bool write_file(const std::filesystem::path& path, int images, int first_label, std::mt19937& rng) {
  std::uniform_int_distribution<int> jitter(-noise, noise);
  std::vector<char> bytes(static_cast<std::size_t>(images) * record_bytes);
  for (int i = 0; i < images; ++i) {
    const int label = (first_label + i) % 10;
    char* record = bytes.data() + static_cast<std::size_t>(i) * record_bytes;
    record[0] = static_cast<char>(label);
    for (int c = 0; c < 3; ++c)
      for (int p = 0; p < plane; ++p) {
        const int v = palette[static_cast<std::size_t>(label)][static_cast<std::size_t>(c)] + jitter(rng);
        record[1 + c * plane + p] = static_cast<char>(static_cast<unsigned char>(v < 0 ? 0 : v > 255 ? 255 : v));
      }
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "make_cifar10_fixture: error: cannot write %s\n", path.string().c_str());
    return false;
  }
  return true;
}

int positive(const char* flag, const char* value) {
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  if (*value == '\0' || *end != '\0' || v <= 0 || v > 1000000) {
    std::fprintf(stderr, "make_cifar10_fixture: error: %s %s: expected a whole number in [1, 1000000]\n", flag, value);
    std::exit(2);
  }
  return static_cast<int>(v);
}

unsigned seed_of(const char* value) {
  unsigned v = 0;
  const char* end = value + std::strlen(value);
  const auto [ptr, ec] = std::from_chars(value, end, v);
  if (*value == '\0' || ec != std::errc() || ptr != end) {
    std::fprintf(stderr, "make_cifar10_fixture: error: --seed %s: expected a whole number in [0, 4294967295]\n",
                 value);
    std::exit(2);
  }
  return v;
}

constexpr const char* usage = "usage: make_cifar10_fixture DIR [--train-per-file N] [--test N] [--seed S]\n";

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int train_per_file = 128, test_images = 100;
  unsigned seed = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--train-per-file" || a == "--test" || a == "--seed") && i + 1 < argc) {
      const int v = a == "--seed" ? 0 : positive(argv[i], argv[i + 1]);
      if (a == "--train-per-file") train_per_file = v;
      else if (a == "--test") test_images = v;
      else seed = seed_of(argv[i + 1]);
      ++i;
    } else if (a == "--help" || a == "-h") {
      std::fputs(usage, stdout);
      return 0;
    } else if (a.empty() || a[0] == '-' || !dir.empty()) {
      std::fputs(usage, stderr);
      return 2;
    } else {
      dir = a;
    }
  }
  if (dir.empty()) {
    std::fputs(usage, stderr);
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "make_cifar10_fixture: error: cannot create %s: %s\n", dir.c_str(), ec.message().c_str());
    return 1;
  }
  std::mt19937 rng(seed);
  for (int f = 1; f <= 5; ++f)
    if (!write_file(std::filesystem::path(dir) / ("data_batch_" + std::to_string(f) + ".bin"), train_per_file, f,
                    rng))
      return 1;
  if (!write_file(std::filesystem::path(dir) / "test_batch.bin", test_images, 0, rng)) return 1;
  std::printf("make_cifar10_fixture: wrote %d train images (5 files of %d) and %d test images to %s\n",
              5 * train_per_file, train_per_file, test_images, dir.c_str());
  return 0;
}
