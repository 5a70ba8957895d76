// IDX files and MNIST / Fashion-MNIST: plain and gzip files decode to the bytes written; every kind of bad
// file throws a DataError naming the file, the byte offset and what was expected; the real Fashion-MNIST
// (Debian's dataset-fashion-mnist) loads when installed, and the case is reported skipped otherwise.
#include <zlib.h>

#include <sys/stat.h>

#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <kiln/data/data.hpp>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "support/peak_memory.hpp"
#include "support/reference.hpp"
#include "support/temp_dir.hpp"

namespace {
using kiln::data::DataError;
using kiln::test::TempDir;

std::vector<std::uint8_t> idx_bytes(int rank, const std::vector<std::uint32_t>& dims, const std::vector<std::uint8_t>& values,
                                    std::uint8_t type = 0x08) {
  std::vector<std::uint8_t> b{0, 0, type, static_cast<std::uint8_t>(rank)};
  for (auto d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(d >> s));
  b.insert(b.end(), values.begin(), values.end());
  return b;
}

std::string write_gz(const TempDir& dir, const std::string& name, const std::vector<std::uint8_t>& bytes) {
  const std::string path = dir.file(name);
  gzFile f = gzopen(path.c_str(), "wb");
  BOOST_REQUIRE(f != nullptr);
  BOOST_REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  gzclose(f);
  return path;
}

/// Pixel (i, r, c) of the test images: a pattern that differs per image.
std::uint8_t pixel(int i, int r, int c) { return static_cast<std::uint8_t>((i * 31 + r * 7 + c * 3) % 256); }

std::vector<std::uint8_t> images(int n, int rows = 28, int cols = 28) {
  std::vector<std::uint8_t> v;
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) v.push_back(pixel(i, r, c));
  return idx_bytes(3, {static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(rows), static_cast<std::uint32_t>(cols)}, v);
}
std::vector<std::uint8_t> labels(const std::vector<std::uint8_t>& l) {
  return idx_bytes(1, {static_cast<std::uint32_t>(l.size())}, l);
}

/// A predicate for BOOST_CHECK_EXCEPTION: the message contains every part.
auto says(std::vector<std::string> parts) {
  return [parts](const DataError& e) {
    const std::string m = e.what();
    for (const auto& p : parts)
      if (m.find(p) == std::string::npos) {
        BOOST_TEST_MESSAGE("message lacks '" << p << "': " << m);
        return false;
      }
    return true;
  };
}

const std::string fashion_mnist_root = "/usr/share/datasets/fashion-mnist";

/// Precondition of the case on the real files: Boost.Test reports it skipped, with this reason, without them.
boost::test_tools::assertion_result fashion_mnist_installed(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result installed(
      std::filesystem::exists(fashion_mnist_root + "/t10k-images-idx3-ubyte.gz"));
  installed.message() << "no " << fashion_mnist_root
                      << "/t10k-images-idx3-ubyte.gz (Debian: apt-get install dataset-fashion-mnist)";
  return installed;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(data)
BOOST_AUTO_TEST_SUITE(idx)

BOOST_AUTO_TEST_CASE(plain_and_gzip_files_decode_to_the_bytes_written) {
  TempDir dir;
  const auto bytes = images(3, 4, 5);
  const auto plain = dir.write("a-idx3-ubyte", bytes);
  const auto gz = write_gz(dir, "a-idx3-ubyte.gz", bytes);
  for (const auto& path : {plain, gz}) {
    const auto a = kiln::data::read_idx(path, 3);
    BOOST_TEST(a.dims == (std::vector<kiln::index_t>{3, 4, 5}), boost::test_tools::per_element());
    BOOST_TEST(a.values.size() == 60u);
    BOOST_TEST(a.values[0] == pixel(0, 0, 0));
    BOOST_TEST(a.values[59] == pixel(2, 3, 4));
  }
}

BOOST_AUTO_TEST_CASE(mnist_split_reads_images_scaled_and_labels) {
  TempDir dir;
  write_gz(dir, "train-images-idx3-ubyte.gz", images(3));
  dir.write("train-labels-idx1-ubyte", labels({7, 0, 9}));  // plain and .gz may be mixed
  kiln::data::Mnist train(dir.path().string(), true);
  static_assert(kiln::data::dataset<kiln::data::Mnist>);
  BOOST_TEST(train.size() == 3);
  const auto e = kiln::data::get(train, 2);
  BOOST_TEST(e.y[0] == 9);
  BOOST_TEST(e.x.size() == 784u);
  BOOST_TEST(e.x[5 * 28 + 6] == pixel(2, 5, 6) / 255.0f);
  BOOST_TEST(kiln::data::Mnist(dir.path().string(), true, 2).size() == 2);  // limit
  // Bytes<Mnist>: the same samples as their stored bytes.
  const kiln::data::Bytes bytes(train);
  static_assert(std::is_same_v<kiln::data::sample_type_t<decltype(bytes)>, std::uint8_t>);
  const auto b = kiln::data::get(bytes, 2);
  BOOST_TEST(b.y[0] == 9);
  bool same = b.x.size() == e.x.size();
  for (std::size_t k = 0; same && k < b.x.size(); ++k) same = static_cast<float>(b.x[k]) / 255.0f == e.x[k];
  BOOST_TEST(same, "Bytes<Mnist> sample 2 is not read()'s sample times 255");
  // read() checks its index and spans (get(train, train.size()) read past both vectors).
  BOOST_CHECK_EXCEPTION(kiln::data::get(train, 3), kiln::ValueError,
                        kiln::test::message_contains({"Mnist::read: index 3 out of range", "0 <= i < 3"}));
  std::vector<float> ten(10);
  std::int64_t y = 0;
  BOOST_CHECK_EXCEPTION(train.read(0, ten, std::span<std::int64_t>(&y, 1)), kiln::ValueError,
                        kiln::test::message_contains({"spans of 10 inputs", "expected 784 and 1"}));
  std::vector<std::uint8_t> row(784);
  BOOST_CHECK_EXCEPTION(train.read_bytes(-1, row, std::span<std::int64_t>(&y, 1)), kiln::ValueError,
                        kiln::test::message_contains({"Mnist::read_bytes: index -1"}));
}

BOOST_AUTO_TEST_CASE(bad_files_name_the_file_the_offset_and_the_expectation) {
  TempDir dir;
  const std::string root = dir.path().string();
  BOOST_CHECK_EXCEPTION(kiln::data::Mnist(root, false), DataError,
                        says({"t10k-images-idx3-ubyte", "no such file", "dataset-fashion-mnist"}));
  // The root is one of the files (--data .../train-images-idx3-ubyte.gz), or nothing: said as such.
  const auto one_file = dir.write("train-images-idx3-ubyte.gz", {});
  BOOST_CHECK_EXCEPTION(kiln::data::Mnist(one_file, true), DataError,
                        says({one_file + ": directory: not a directory; expected a directory holding the IDX files",
                              "train-images-idx3-ubyte[.gz]", "; pass its folder, " + root}));
  BOOST_CHECK_EXCEPTION(kiln::data::Mnist(root + "/absent", true), DataError,
                        says({root + "/absent: directory: no such directory; expected a directory holding"}));

  BOOST_CHECK_EXCEPTION(kiln::data::read_idx(dir.file("absent-idx3-ubyte"), 3), DataError,
                        says({"absent-idx3-ubyte", "byte 0", "no such file"}));

  const auto empty = dir.write("empty", {});
  BOOST_CHECK_EXCEPTION(kiln::data::read_idx(empty, 3), DataError, says({"empty", "byte 0", "the file is empty"}));

  auto wrong_magic = images(1);
  wrong_magic[3] = 2;
  BOOST_CHECK_EXCEPTION(kiln::data::read_idx(dir.write("magic", wrong_magic), 3), DataError,
                        says({"magic", "byte 0", "magic number 0x00000802", "expected 0x00000803"}));
  BOOST_CHECK_EXCEPTION(kiln::data::read_idx(dir.write("float", images(1)), 1), DataError,
                        says({"float", "byte 0", "expected 0x00000801"}));

  auto truncated = images(2);
  truncated.resize(truncated.size() - 10);
  BOOST_CHECK_EXCEPTION(kiln::data::read_idx(dir.write("truncated", truncated), 3), DataError,
                        says({"truncated", "byte " + std::to_string(truncated.size()), "ends early", "1568 data bytes"}));
  // Too long: the position is the first extra byte's (the header and the data before it).
  auto longer = images(2);
  const std::size_t expected_size = longer.size();
  longer.resize(expected_size + 3, 7);
  BOOST_CHECK_EXCEPTION(kiln::data::read_idx(dir.write("longer", longer), 3), DataError,
                        says({"longer", "byte " + std::to_string(expected_size), "extra bytes: 1571 data bytes",
                              "expected 1568 data bytes"}));
  auto short_header = images(1);
  short_header.resize(9);
  BOOST_CHECK_EXCEPTION(kiln::data::read_idx(dir.write("header", short_header), 3), DataError,
                        says({"header", "byte 9", "ends inside the header", "16 header bytes"}));

  // A gzip stream cut in half.
  const auto gz = write_gz(dir, "cut.gz", images(20));
  const auto size = std::filesystem::file_size(gz);
  std::filesystem::resize_file(gz, size / 2);
  BOOST_CHECK_EXCEPTION(kiln::data::read_idx(gz, 3), DataError, says({"cut.gz", "of the decompressed data", "gzip"}));
  // A bad checksum (the trailer's CRC-32 flipped) is found at the end: the position is where zlib stopped in
  // the compressed file (there, just past the CRC-32), and zlib's message is given without the path it starts with
  // (named once, at the front).
  const auto crc = write_gz(dir, "crc.gz", images(100));  // 78,416 bytes decompressed: two reads
  {
    std::ifstream in(crc, std::ios::binary);
    std::vector<std::uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    b[b.size() - 8] ^= 0xFF;
    dir.write("crc.gz", b);
  }
  BOOST_CHECK_EXCEPTION(kiln::data::read_idx(crc, 3), DataError, [&](const DataError& e) {
    const std::string m = e.what();
    BOOST_TEST_MESSAGE(m);
    const std::string compressed = std::to_string(std::filesystem::file_size(crc) - 4);  // past the CRC-32
    return m.rfind(crc + ": at or before byte " + compressed + " of the compressed file (65536 bytes decompressed before it): "
                   "gzip error: incorrect data check (the checksum at the end of the gzip stream does not match "
                   "its data: the file is corrupt)", 0) == 0 &&
           m.find(crc, 1) == std::string::npos;
  });
  // gzip data in a file not named .gz, or a .gz compressed twice: the magic number says so.
  {
    const auto packed = write_gz(dir, "packed.gz", images(1));
    std::ifstream in(packed, std::ios::binary);
    const std::vector<std::uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto unnamed = dir.write("packed-idx3-ubyte", b);
    BOOST_CHECK_EXCEPTION(kiln::data::read_idx(unnamed, 3), DataError,
                          says({unnamed + ": byte 0: magic number 0x1F8B0800 (gzip-compressed data); expected "
                                "0x00000803", "; name the file " + unnamed + ".gz, or gunzip it"}));
    const auto twice = write_gz(dir, "twice.gz", b);
    BOOST_CHECK_EXCEPTION(kiln::data::read_idx(twice, 3), DataError,
                          says({twice + ": byte 0: magic number 0x1F8B0800 (gzip data inside the gzip file: "
                                "compressed twice)", "; decompress it once more"}));
  }
  // A .gz that is a pipe is refused before gzopen, which would wait for a writer forever; a missing one
  // is named as such.
  const auto fifo = dir.file("pipe-idx3-ubyte.gz");
  BOOST_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  BOOST_CHECK_EXCEPTION(kiln::data::read_idx(fifo, 3), DataError,
                        says({fifo + ": byte 0: not a regular file (a pipe or a device?); expected a readable gzip file"}));
  BOOST_CHECK_EXCEPTION(kiln::data::read_idx(dir.file("absent.gz"), 3), DataError,
                        says({"absent.gz: byte 0: no such file; expected a readable gzip file"}));
  BOOST_CHECK_EXCEPTION(kiln::data::read_idx("", 3), DataError, says({"\"\": byte 0: the path is empty"}));

  // Counts that disagree, a label out of range, images that are not 28 x 28.
  dir.write("t10k-images-idx3-ubyte", images(3));
  dir.write("t10k-labels-idx1-ubyte", labels({1, 2}));
  BOOST_CHECK_EXCEPTION(kiln::data::Mnist(root, false), DataError,
                        says({"t10k-labels-idx1-ubyte", "2 labels for 3 images", "as many labels as images"}));
  dir.write("t10k-labels-idx1-ubyte", labels({1, 12, 3}));
  BOOST_CHECK_EXCEPTION(kiln::data::Mnist(root, false), DataError,
                        says({"t10k-labels-idx1-ubyte", "byte 9", "label 12", "[0, 9]"}));
  dir.write("t10k-images-idx3-ubyte", images(3, 27, 28));
  dir.write("t10k-labels-idx1-ubyte", labels({1, 2, 3}));
  BOOST_CHECK_EXCEPTION(kiln::data::Mnist(root, false), DataError,
                        says({"t10k-images-idx3-ubyte", "byte 8:", "images of 27 x 28", "28 x 28"}));
  dir.write("t10k-images-idx3-ubyte", images(3, 28, 27));  // the width is the header's third dimension
  BOOST_CHECK_EXCEPTION(kiln::data::Mnist(root, false), DataError,
                        says({"t10k-images-idx3-ubyte", "byte 12:", "images of 28 x 27"}));
  // No images at all: refused where the file is known (not later, by the sampler of an empty dataset).
  dir.write("t10k-images-idx3-ubyte", images(0));
  dir.write("t10k-labels-idx1-ubyte", labels({}));
  BOOST_CHECK_EXCEPTION(kiln::data::Mnist(root, false), DataError,
                        says({"t10k-images-idx3-ubyte: byte 4: 0 images; expected at least one image"}));
}

BOOST_AUTO_TEST_CASE(a_gz_that_inflates_past_its_header_stops_where_the_data_should_end) {
  // A 256 KiB .gz whose header says one 28 x 28 image and whose stream inflates to 256 MiB: the reader
  // stops decompressing past the 800 bytes the header says (it held all 256 MiB before saying "extra").
  TempDir dir;
  const std::string path = dir.file("bomb-idx3-ubyte.gz");
  {
    gzFile f = gzopen(path.c_str(), "wb9");
    BOOST_REQUIRE(f != nullptr);
    const auto header = images(1);
    BOOST_REQUIRE(gzwrite(f, header.data(), static_cast<unsigned>(header.size())) == static_cast<int>(header.size()));
    const std::vector<std::uint8_t> zeros(1 << 20, 0);
    for (int k = 0; k < 256; ++k) BOOST_REQUIRE(gzwrite(f, zeros.data(), 1u << 20) == 1 << 20);
    gzclose(f);
  }
  BOOST_REQUIRE(kiln::test::reset_peak());
  const long before = kiln::test::peak_mib();
  BOOST_CHECK_EXCEPTION(kiln::data::read_idx(path, 3), DataError,
                        says({path + ": byte 800: extra bytes: more than 784 data bytes; expected 784 data bytes"}));
  BOOST_TEST(kiln::test::peak_mib() - before < 64, "peak memory grew by " << kiln::test::peak_mib() - before << " MiB");
  // A .gz that holds what its header says reads whole.
  BOOST_TEST(kiln::data::read_idx(write_gz(dir, "one-idx3-ubyte.gz", images(1)), 3).values.size() == 784u);
}

BOOST_AUTO_TEST_CASE(dimensions_whose_product_wraps_around_64_bits_are_a_truncated_file) {
  // 2^30 x 2^30 x 2^4 = 2^64 and 2^30 x 2^30 x 2^30 = 2^90 are both 0 modulo 2^64: the product used to
  // wrap, so a header with no data after it loaded as an array of those dimensions and no values. Found
  // by tests/fuzz/run-fuzz.sh (tests/fuzz/regressions/idx/crash-0619cf68..., and dims-product-*).
  TempDir dir;
  const auto wrap = dir.write("wrap", idx_bytes(3, {1u << 30, 1u << 30, 16}, {}));
  BOOST_CHECK_EXCEPTION(kiln::data::read_idx(wrap, 3), DataError,
                        says({"wrap", "byte 16", "ends early", ": 0 data bytes", "expected 1.84467e+19 data bytes",
                              "1073741824 x 1073741824 x 16"}));
  const auto cube = dir.write("cube", idx_bytes(3, {1u << 30, 1u << 30, 1u << 30}, {1, 2}));
  BOOST_CHECK_EXCEPTION(kiln::data::read_idx(cube, 3), DataError, says({"cube", "ends early", ": 2 data bytes"}));
  // Products that fit are printed exactly; a dimension of 0 still means no values, whatever the others claim.
  BOOST_CHECK_EXCEPTION(kiln::data::read_idx(dir.write("header-only", idx_bytes(3, {60000, 28, 28}, {})), 3), DataError,
                        says({"header-only", "ends early", "expected 47040000 data bytes for dimensions 60000 x 28 x 28"}));
  const auto none = kiln::data::read_idx(dir.write("none", idx_bytes(3, {0, 1u << 30, 1u << 30}, {})), 3);
  BOOST_TEST(none.count() == 0);
  BOOST_TEST(none.values.empty());
  BOOST_CHECK_EXCEPTION(kiln::data::read_idx(dir.write("extra", idx_bytes(3, {1u << 30, 0, 1u << 30}, {5})), 3),
                        DataError, says({"extra", "byte 16", "extra bytes: 1 data bytes", "expected 0 data bytes"}));
}

BOOST_AUTO_TEST_CASE(a_rank_outside_one_byte_is_an_argument_error) {
  // The rank is the magic number's last byte: -1 wrapped the header size around 2^64, 256 ran into the
  // type byte. Refused before the file is read.
  TempDir dir;
  const auto path = dir.write("a-idx3-ubyte", images(2, 3, 4));
  for (const int rank : {-1, 256}) {
    BOOST_CHECK_EXCEPTION(
        kiln::data::read_idx(path, rank), kiln::ValueError,
        kiln::test::message_contains(
            {"kiln::data::read_idx: rank is " + std::to_string(rank), "it must be 0 to 255"}));
    BOOST_CHECK_THROW(kiln::data::read_idx(dir.file("missing"), rank), kiln::ValueError);
  }
  BOOST_TEST(kiln::data::read_idx(path, 3).dims == (std::vector<kiln::index_t>{2, 3, 4}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_folder_in_place_of_a_file_is_rejected) {
  // A folder opens as a stream whose end is at byte 2^63 - 1 (ext4): read_idx threw std::bad_alloc.
  TempDir dir;
  const std::string root = dir.path().string();
  std::filesystem::create_directory(dir.path() / "t10k-images-idx3-ubyte");
  dir.write("t10k-labels-idx1-ubyte", labels({1}));
  BOOST_CHECK_EXCEPTION(kiln::data::read_idx(dir.file("t10k-images-idx3-ubyte"), 3), DataError,
                        says({"t10k-images-idx3-ubyte", "byte 0", "a directory, not a file"}));
  BOOST_CHECK_EXCEPTION(kiln::data::Mnist(root, false), DataError,
                        says({"t10k-images-idx3-ubyte", "a directory, not a file"}));
}

// Reported skipped, with the reason, where dataset-fashion-mnist is not installed (scripts/install-deps
// installs it).
BOOST_AUTO_TEST_CASE(debian_fashion_mnist_loads_when_installed,
                     *boost::unit_test::precondition(fashion_mnist_installed)) {
  kiln::data::FashionMnist test(fashion_mnist_root, false);
  BOOST_TEST(test.size() == 10000);
  std::vector<int> count(10, 0);
  for (auto l : test.labels()) ++count[l];
  BOOST_TEST(count == std::vector<int>(10, 1000), boost::test_tools::per_element());
  BOOST_TEST(test.labels()[0] == 9);  // an ankle boot
  unsigned sum = 0;
  for (int k = 0; k < 784; ++k) sum += test.images()[static_cast<std::size_t>(k)];
  BOOST_TEST(sum == 33456u);  // the first test image's pixel sum, from Python's gzip module
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
