// Cifar10: small batch files in the CIFAR-10 binary format (5 train batches of 3 records, a test batch of 4,
// known pixel patterns) read back with the right sizes, labels, scaling and channel order; every malformed
// file is rejected with a message naming the file, the byte offset and what was expected.
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <kiln/data/cifar10.hpp>
#include <kiln/data/dataset.hpp>
#include <span>
#include <string>
#include <vector>

namespace {
namespace fs = std::filesystem;
using kiln::data::Cifar10;

static_assert(kiln::data::dataset<Cifar10>, "Cifar10 must model kiln::data::dataset");
static_assert(Cifar10::sample_shape::static_numel() == 3 * 32 * 32);
static_assert(Cifar10::target_shape::static_numel() == 1);

constexpr int train_per_file = 3;  // records in each of data_batch_1..5.bin
constexpr int test_records = 4;    // records in test_batch.bin

/// The label of record g (counted across the split's files): every class 0-9 appears, 9 included.
std::uint8_t label_of(bool train, int g) {
  return static_cast<std::uint8_t>(train ? (g * 3 + 1) % 10 : 9 - g);
}

/// The pixel byte of record g at channel c, row h, column w: differs between channels, rows, columns and
/// records, so a swapped axis or a record read from the wrong place changes the value.
std::uint8_t pixel_of(bool train, int g, int c, int h, int w) {
  return static_cast<std::uint8_t>((g * 31 + c * 85 + h * 7 + w + (train ? 0 : 128)) & 0xFF);
}

/// One 3073-byte record: the label byte, then R, G, B planes of 32x32 row-major.
std::vector<char> record(bool train, int g, int label) {
  std::vector<char> r;
  r.push_back(static_cast<char>(label));
  for (int c = 0; c < 3; ++c)
    for (int h = 0; h < 32; ++h)
      for (int w = 0; w < 32; ++w) r.push_back(static_cast<char>(pixel_of(train, g, c, h, w)));
  return r;
}

void write_bytes(const fs::path& file, const std::vector<char>& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  BOOST_REQUIRE(out.good());
}

/// A scratch folder holding a complete, valid small split pair; removed at the end of the test.
struct CifarFiles {
  fs::path dir;
  explicit CifarFiles(const std::string& name)
      : dir(fs::temp_directory_path() /
            ("kiln_test_cifar10_" + name + "_" + std::to_string(static_cast<long>(::getpid())))) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (int f = 0; f < 5; ++f) {
      std::vector<char> bytes;
      for (int r = 0; r < train_per_file; ++r) {
        const int g = f * train_per_file + r;
        const auto rec = record(true, g, label_of(true, g));
        bytes.insert(bytes.end(), rec.begin(), rec.end());
      }
      write_bytes(file(true, f), bytes);
    }
    std::vector<char> bytes;
    for (int g = 0; g < test_records; ++g) {
      const auto rec = record(false, g, label_of(false, g));
      bytes.insert(bytes.end(), rec.begin(), rec.end());
    }
    write_bytes(file(false, 0), bytes);
  }
  ~CifarFiles() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  fs::path file(bool train, int f) const {
    return dir / (train ? "data_batch_" + std::to_string(f + 1) + ".bin" : std::string("test_batch.bin"));
  }
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// A DataError predicate: the message names `file` and holds every one of `parts`.
auto names(const fs::path& file, std::vector<std::string> parts) {
  return [file = file.string(), parts = std::move(parts)](const kiln::data::DataError& e) {
    const std::string msg = e.what();
    BOOST_TEST_MESSAGE(msg);
    bool ok = contains(msg, file) && e.file() == file;
    for (const auto& p : parts) ok = ok && contains(msg, p);
    return ok;
  };
}
}  // namespace

BOOST_AUTO_TEST_SUITE(data)
BOOST_AUTO_TEST_SUITE(cifar10)

BOOST_AUTO_TEST_CASE(train_split_reads_all_five_batches_in_order) {
  CifarFiles files("train");
  const Cifar10 d(files.dir.string(), /*train=*/true);
  BOOST_TEST(d.size() == 5 * train_per_file);
  BOOST_TEST(d.train());
  BOOST_TEST(d.directory() == files.dir.string());
  BOOST_REQUIRE_EQUAL(d.labels().size(), 15u);
  BOOST_REQUIRE_EQUAL(d.images().size(), 15u * 3072u);
  for (int g = 0; g < 15; ++g) {
    BOOST_TEST(d.labels()[static_cast<std::size_t>(g)] == label_of(true, g));
    // Raw bytes: image g at g * 3072, [3, 32, 32].
    BOOST_TEST(d.images()[static_cast<std::size_t>(g) * 3072 + 1024 + 5 * 32 + 7] ==
               pixel_of(true, g, 1, 5, 7));
  }
}

BOOST_AUTO_TEST_CASE(test_split_reads_test_batch_only) {
  CifarFiles files("test");
  const Cifar10 d(files.dir.string(), /*train=*/false);
  BOOST_TEST(d.size() == test_records);
  BOOST_TEST(!d.train());
  const std::vector<std::uint8_t> expected{9, 8, 7, 6};
  BOOST_TEST(d.labels() == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(read_scales_bytes_by_255_in_channel_row_column_order) {
  CifarFiles files("read");
  const Cifar10 d(files.dir.string(), /*train=*/true);
  std::vector<float> x(3072, -1.0f);
  std::vector<std::int64_t> y(1, -1);
  for (int g = 0; g < d.size(); ++g) {
    d.read(g, x, y);
    BOOST_TEST(y[0] == label_of(true, g));
    bool all = true;
    for (int c = 0; c < 3; ++c)
      for (int h = 0; h < 32; ++h)
        for (int w = 0; w < 32; ++w)
          all = all && x[static_cast<std::size_t>(c * 1024 + h * 32 + w)] ==
                           static_cast<float>(pixel_of(true, g, c, h, w)) / 255.0f;
    BOOST_TEST(all, "image " << g << " differs from its bytes / 255 at x[c*1024 + h*32 + w]");
  }
  // Spelled out for record 4 (data_batch_2.bin, record 1): byte = 4*31 + c*85 + h*7 + w.
  d.read(4, x, y);
  BOOST_TEST(y[0] == 3);                                 // (4*3 + 1) % 10
  BOOST_TEST(x[0] == 124.0f / 255.0f);                   // R, row 0, column 0
  BOOST_TEST(x[1024] == 209.0f / 255.0f);                // G, row 0, column 0
  BOOST_TEST(x[2048 + 31 * 32 + 31] == 30.0f / 255.0f);  // B, row 31, column 31: (124 + 170 + 217 + 31) & 255
  // 0 and 255 map to exactly 0 and 1 (ToTensor).
  bool saw_zero = false, saw_one = false;
  for (int g = 0; g < d.size(); ++g) {
    d.read(g, x, y);
    for (float v : x) {
      BOOST_REQUIRE(v >= 0.0f && v <= 1.0f);
      saw_zero = saw_zero || v == 0.0f;
      saw_one = saw_one || v == 1.0f;
    }
  }
  BOOST_TEST(saw_zero);
  BOOST_TEST(saw_one);
  // read_bytes (Bytes<Cifar10>): the stored bytes in the same order.
  std::vector<std::uint8_t> raw(3072);
  d.read_bytes(4, raw, y);
  BOOST_TEST(y[0] == 3);
  BOOST_TEST(raw[0] == 124);
  BOOST_TEST(raw[1024] == 209);
  BOOST_TEST(raw[2048 + 31 * 32 + 31] == 30);
  BOOST_CHECK_EXCEPTION(d.read_bytes(d.size(), raw, y), kiln::ValueError, [&](const kiln::ValueError& e) {
    return contains(e.what(), "Cifar10::read_bytes: index " + std::to_string(d.size()) + " out of range");
  });
}

BOOST_AUTO_TEST_CASE(get_returns_one_sample_as_values) {
  CifarFiles files("get");
  const std::string root = files.dir.string();
  // [doc:cifar10]
  kiln::data::Cifar10 test(root, /*train=*/false);  // root/test_batch.bin
  auto e = kiln::data::get(test, 2);                // e.x: 3072 floats [3, 32, 32], e.y: 1 label
  auto name = kiln::data::Cifar10::class_names()[static_cast<std::size_t>(e.y[0])];  // "airplane" ... "truck"
  // [doc:cifar10]
  BOOST_TEST(e.x.size() == 3072u);
  BOOST_TEST(e.y.size() == 1u);
  BOOST_TEST(e.y[0] == 7);
  BOOST_TEST(name == "horse");
  BOOST_TEST(e.x[32] == static_cast<float>(pixel_of(false, 2, 0, 1, 0)) / 255.0f);
}

BOOST_AUTO_TEST_CASE(class_names_are_torchvisions) {
  const auto n = Cifar10::class_names();
  static_assert(decltype(n)::extent == 10);
  const std::vector<std::string> expected{"airplane", "automobile", "bird",  "cat",  "deer",
                                          "dog",      "frog",       "horse", "ship", "truck"};
  for (std::size_t i = 0; i < 10; ++i) BOOST_TEST(std::string(n[i]) == expected[i]);
  BOOST_TEST(Cifar10::file_names(true).size() == 5u);
  BOOST_TEST(Cifar10::file_names(true)[4] == "data_batch_5.bin");
  BOOST_TEST(Cifar10::file_names(false)[0] == "test_batch.bin");
}

BOOST_AUTO_TEST_CASE(extracted_archive_folder_is_accepted_as_root) {
  CifarFiles files("parent");
  const auto parent = files.dir / "extract";
  fs::create_directories(parent);
  const auto batches = parent / "cifar-10-batches-bin";  // what `tar xzf cifar-10-binary.tar.gz` creates
  fs::create_directories(batches);
  for (int f = 0; f < 5; ++f) fs::rename(files.file(true, f), batches / files.file(true, f).filename());
  fs::rename(files.file(false, 0), batches / "test_batch.bin");
  const Cifar10 d(parent.string(), /*train=*/true);
  BOOST_TEST(d.size() == 15);
  BOOST_TEST(d.directory() == batches.string());
  BOOST_TEST(d.labels()[14] == label_of(true, 14));
}

BOOST_AUTO_TEST_CASE(read_rejects_an_index_out_of_range_and_wrong_span_sizes) {
  CifarFiles files("range");
  const Cifar10 d(files.dir.string(), /*train=*/false);
  std::vector<float> x(3072);
  std::vector<std::int64_t> y(1);
  const auto says = [](std::string part) {
    return [part](const kiln::ValueError& e) { return contains(e.what(), part); };
  };
  BOOST_CHECK_EXCEPTION(d.read(4, x, y), kiln::ValueError, says("index 4 out of range; expected 0 <= i < 4"));
  BOOST_CHECK_EXCEPTION(d.read(-1, x, y), kiln::ValueError, says("index -1 out of range"));
  BOOST_CHECK_EXCEPTION(d.read(0, std::span<float>(x).first(3071), y), kiln::ValueError,
                        says("3071 inputs and 1 targets; expected 3072 and 1"));
  BOOST_CHECK_NO_THROW(d.read(3, x, y));
}

BOOST_AUTO_TEST_CASE(a_missing_directory_says_how_to_get_the_data) {
  const auto root = fs::temp_directory_path() / "kiln_test_cifar10_no_such_dir";
  fs::remove_all(root);
  BOOST_CHECK_EXCEPTION(
      Cifar10(root.string(), true), kiln::data::DataError,
      names(root, {"directory: no such directory", "data_batch_1.bin", "scripts/get-cifar10"}));
  // One of the batch files given for the folder: its folder is named, not a download into a file.
  CifarFiles files("file_for_folder");
  const auto test_batch = files.file(false, 0);
  BOOST_CHECK_EXCEPTION(Cifar10(test_batch.string(), false), kiln::data::DataError,
                        names(test_batch, {"directory: not a directory", "pass its folder, " + files.dir.string()}));
}

BOOST_AUTO_TEST_CASE(a_missing_batch_file_is_named_with_how_to_get_it) {
  CifarFiles files("missing");
  fs::remove(files.file(true, 2));
  BOOST_CHECK_EXCEPTION(Cifar10(files.dir.string(), true), kiln::data::DataError,
                        names(files.file(true, 2), {"byte 0: no such file",
                                                    "expected the CIFAR-10 binary batch "
                                                    "data_batch_3.bin",
                                                    "scripts/get-cifar10",
                                                    // the folder holds batches: the script's is not read
                                                    "then read " +
                                                        (files.dir / "cifar-10-batches-bin").string()}));
  fs::remove(files.file(false, 0));
  BOOST_CHECK_EXCEPTION(Cifar10(files.dir.string(), false), kiln::data::DataError,
                        names(files.file(false, 0), {"byte 0: no such file", "scripts/get-cifar10"}));
  // The train split still needs only its own files: data_batch_3.bin is its one problem.
  BOOST_CHECK_EXCEPTION(Cifar10(files.dir.string(), true), kiln::data::DataError,
                        names(files.file(true, 2), {"no such file"}));
}

BOOST_AUTO_TEST_CASE(the_python_version_or_an_archive_not_extracted_is_named) {
  const auto root = fs::temp_directory_path() / "kiln_test_cifar10_other_download";
  fs::remove_all(root);
  fs::create_directories(root / "cifar-10-batches-py");
  std::ofstream(root / "cifar-10-batches-py" / "data_batch_1") << "pickle";
  for (const auto& where : {root, root / "cifar-10-batches-py"})
    BOOST_CHECK_EXCEPTION(Cifar10(where.string(), true), kiln::data::DataError,
                          names(where / "data_batch_1.bin",
                                {"no such file (found the Python version of CIFAR-10, whose batches are pickles)",
                                 "scripts/get-cifar10"}));
  fs::remove_all(root / "cifar-10-batches-py");
  std::ofstream(root / "cifar-10-binary.tar.gz") << "archive";
  BOOST_CHECK_EXCEPTION(Cifar10(root.string(), false), kiln::data::DataError,
                        names(root / "test_batch.bin", {"no such file (found cifar-10-binary.tar.gz, not extracted)"}));
  fs::remove_all(root);
}

BOOST_AUTO_TEST_CASE(a_batch_that_is_a_folder_is_rejected) {
  CifarFiles files("folder");
  fs::remove(files.file(true, 1));
  fs::create_directories(files.file(true, 1));
  BOOST_CHECK_EXCEPTION(Cifar10(files.dir.string(), true), kiln::data::DataError,
                        names(files.file(true, 1), {"byte 0: not a regular file"}));
}

BOOST_AUTO_TEST_CASE(a_partial_record_is_rejected_at_its_byte_offset) {
  CifarFiles files("partial");
  std::vector<char> bytes;
  for (int g = 0; g < 2; ++g) {
    const auto rec = record(false, g, 1);
    bytes.insert(bytes.end(), rec.begin(), rec.end());
  }
  bytes.resize(bytes.size() + 100, 0);  // 2 * 3073 + 100 = 6246 bytes
  write_bytes(files.file(false, 0), bytes);
  BOOST_CHECK_EXCEPTION(
      Cifar10(files.dir.string(), false), kiln::data::DataError,
      names(files.file(false, 0), {"byte 6146: file size 6246 bytes ends in a partial record of 100 bytes",
                                   "expected a whole number of records of 3073 bytes"}));
  // One byte short of a record (a truncated download): the partial record starts at byte 0.
  bytes.resize(3072);
  write_bytes(files.file(true, 4), bytes);
  BOOST_CHECK_EXCEPTION(
      Cifar10(files.dir.string(), true), kiln::data::DataError,
      names(files.file(true, 4),
            {"byte 0: file size 3072 bytes ends in a partial record of 3072", "3073 bytes"}));
}

BOOST_AUTO_TEST_CASE(a_train_batch_cut_at_a_record_boundary_is_rejected) {
  // Whole records, one fewer than the other batches: its size alone looks fine.
  CifarFiles files("short");
  std::vector<char> bytes;
  for (int r = 0; r + 1 < train_per_file; ++r) {
    const auto rec = record(true, train_per_file + r, label_of(true, train_per_file + r));
    bytes.insert(bytes.end(), rec.begin(), rec.end());
  }
  write_bytes(files.file(true, 1), bytes);
  BOOST_CHECK_EXCEPTION(
      Cifar10(files.dir.string(), true), kiln::data::DataError,
      names(files.file(true, 1),
            {"holds " + std::to_string(train_per_file - 1) + " records where data_batch_1.bin holds " +
                 std::to_string(train_per_file) + " (a file cut short?)",
             "as many records in each train batch"}));
}

BOOST_AUTO_TEST_CASE(a_label_above_9_is_rejected_at_its_record) {
  CifarFiles files("label");
  std::vector<char> bytes;
  for (int r = 0; r < 3; ++r) {
    const auto rec = record(true, 9 + r, r == 2 ? 10 : 9);  // 9 is the largest valid label; 10 is not
    bytes.insert(bytes.end(), rec.begin(), rec.end());
  }
  write_bytes(files.file(true, 3), bytes);
  BOOST_CHECK_EXCEPTION(
      Cifar10(files.dir.string(), true), kiln::data::DataError,
      names(files.file(true, 3), {"byte 6146: label 10 in record 2", "expected a label byte 0-9"}));
  bytes[0] = static_cast<char>(255);  // an unsigned byte, reported as 255
  write_bytes(files.file(true, 3), bytes);
  BOOST_CHECK_EXCEPTION(Cifar10(files.dir.string(), true), kiln::data::DataError,
                        names(files.file(true, 3), {"byte 0: label 255 in record 0", "0-9"}));
}

BOOST_AUTO_TEST_CASE(an_empty_file_is_rejected) {
  CifarFiles files("empty");
  write_bytes(files.file(false, 0), {});
  BOOST_CHECK_EXCEPTION(
      Cifar10(files.dir.string(), false), kiln::data::DataError,
      names(files.file(false, 0), {"byte 0: empty file", "expected records of 3073 bytes"}));
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
