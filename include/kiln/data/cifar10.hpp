/// Cifar10: the CIFAR-10 binary version, decoded once into memory (torchvision.datasets.CIFAR10 + ToTensor).
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
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
#include "kiln/data/error.hpp"
#include "kiln/tensor/shape.hpp"

namespace kiln::data {

/// The CIFAR-10 images of one split, read from the binary version's batch files
/// (https://www.cs.toronto.edu/~kriz/cifar.html, "CIFAR-10 binary version"; `scripts/get-cifar10` fetches
/// it).
///
/// Files: train = data_batch_1.bin ... data_batch_5.bin (50,000 images, in that order), test = test_batch.bin
/// (10,000). Each file is a run of 3073-byte records: 1 label byte (0-9), then 3072 pixel bytes, 1024 red,
/// 1024 green, 1024 blue, each 32x32 row-major. `root` is the folder holding the .bin files, or the folder
/// the archive was extracted into (then its `cifar-10-batches-bin/` is used). Files of any whole number of
/// records are accepted (the real ones hold 10,000 each).
///
/// The bytes are read once, in the constructor, and kept as uint8 (3 KiB per image, 150 MiB for the train
/// split). Every problem with the files throws DataError naming the file, the byte offset and what was
/// expected.
///
/// Shapes: read(i, x, y): x [3, 32, 32] = byte / 255 (torchvision's ToTensor: x[c*1024 + h*32 + w]),
/// y [] = the label (a class index for CrossEntropyLoss).
///
/// Example:
///   kiln::data::Cifar10 train("data/cifar10", /*train=*/true);        // 50000 images
///   auto e = kiln::data::get(train, 0);                               // x [3, 32, 32], y []
///   auto name = kiln::data::Cifar10::class_names()[e.y[0]];          // "airplane" ... "truck"
class Cifar10 {
 public:
  using sample_shape = Shape<3, 32, 32>;
  using target_type = std::int64_t;
  using target_shape = Shape<>;

  static constexpr index_t channels = 3;
  static constexpr index_t height = 32;
  static constexpr index_t width = 32;
  static constexpr index_t num_classes = 10;
  /// Pixel bytes of one image: 3 * 32 * 32.
  static constexpr std::size_t image_bytes = 3072;
  /// One record in a batch file: the label byte + the image.
  static constexpr std::size_t record_bytes = 1 + image_bytes;

  /// Reads the split's batch files from `root` (train: data_batch_1..5.bin, test: test_batch.bin).
  Cifar10(const std::string& root, bool train) : train_(train) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path dir(root);
    const auto first = std::string(file_names(train).front());
    if (const auto status = fs::status(dir, ec); !fs::is_directory(status)) {
      // One of the batch files itself (--data .../test_batch.bin): its folder is what is meant.
      const fs::path folder = dir.parent_path();
      throw DataError(root, "directory", fs::exists(status) ? "not a directory" : "no such directory",
                      "a directory holding the CIFAR-10 binary batches (" + first + ", ...); " +
                          (fs::is_regular_file(status)
                               ? "pass its folder, " + (folder.empty() ? std::string(".") : folder.string())
                               : how_to_get(root)));
    }
    // The folder the archive was extracted into: use its cifar-10-batches-bin/.
    if (!fs::exists(dir / first, ec) && fs::is_directory(dir / "cifar-10-batches-bin", ec))
      dir /= "cifar-10-batches-bin";
    directory_ = dir.string();

    // Sizes first: the whole split is checked before anything is allocated or decoded.
    std::vector<std::uintmax_t> records;
    for (const std::string_view name : file_names(train)) records.push_back(check_size(dir / name, root));
    // The five train batches hold as many records each (10,000 in the real files): one that holds fewer
    // was cut at a record boundary, which its size alone does not show.
    const auto names_checked = file_names(train);
    for (std::size_t f = 1; f < records.size(); ++f)
      if (records[f] != records[0])
        throw DataError((dir / names_checked[f]).string(), detail::byte_position(records[f] * record_bytes),
                        "holds " + std::to_string(records[f]) + " records where " +
                            std::string(names_checked[0]) + " holds " + std::to_string(records[0]) +
                            " (a file cut short?)",
                        "as many records in each train batch (10,000 in CIFAR-10's); " + how_to_get(root));
    std::uintmax_t total = 0;
    for (auto r : records) total += r;
    labels_.resize(static_cast<std::size_t>(total));
    images_.resize(static_cast<std::size_t>(total) * image_bytes);

    std::size_t first_record = 0;
    const auto names = file_names(train);
    for (std::size_t f = 0; f < names.size(); ++f) {
      read_file(dir / names[f], first_record, static_cast<std::size_t>(records[f]));
      first_record += static_cast<std::size_t>(records[f]);
    }
  }

  /// The number of images: 50,000 (train) or 10,000 (test) for the real files.
  index_t size() const { return static_cast<index_t>(labels_.size()); }

  /// Image i as floats in [0, 1] (byte / 255) into x ([3, 32, 32]: 3072 values), its label into y (1 value).
  void read(index_t i, std::span<float> x, std::span<target_type> y) const {
    detail::check_read("kiln::data::Cifar10::read", i, size(), x.size(), image_bytes, y.size(), 1);
    const std::uint8_t* src = images_.data() + static_cast<std::size_t>(i) * image_bytes;
    for (std::size_t k = 0; k < image_bytes; ++k) x[k] = static_cast<float>(src[k]) / 255.0f;
    y[0] = static_cast<target_type>(labels_[static_cast<std::size_t>(i)]);
  }
  /// Image i as its stored bytes (0-255; Bytes<Cifar10> reads through this), its label into y.
  void read_bytes(index_t i, std::span<std::uint8_t> x, std::span<target_type> y) const {
    detail::check_read("kiln::data::Cifar10::read_bytes", i, size(), x.size(), image_bytes, y.size(), 1);
    const std::uint8_t* src = images_.data() + static_cast<std::size_t>(i) * image_bytes;
    std::copy(src, src + image_bytes, x.begin());
    y[0] = static_cast<target_type>(labels_[static_cast<std::size_t>(i)]);
  }

  /// The class of each label: class_names()[3] == "cat".
  static constexpr std::span<const std::string_view, 10> class_names() { return names_; }

  /// The batch files of a split, in reading order.
  static constexpr std::span<const std::string_view> file_names(bool train) {
    return train ? std::span<const std::string_view>(train_files_)
                 : std::span<const std::string_view>(test_files_);
  }

  /// All images as stored: [N, 3, 32, 32] bytes, image i at i * 3072.
  const std::vector<std::uint8_t>& images() const { return images_; }
  /// All labels, 0-9: [N].
  const std::vector<std::uint8_t>& labels() const { return labels_; }
  /// Whether this is the train split.
  bool train() const { return train_; }
  /// The folder the batches were read from (root, or root/cifar-10-batches-bin).
  const std::string& directory() const { return directory_; }

 private:
  static constexpr std::array<std::string_view, 10> names_{
      "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
  static constexpr std::array<std::string_view, 5> train_files_{
      "data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"};
  static constexpr std::array<std::string_view, 1> test_files_{"test_batch.bin"};

  /// The advice after a missing or damaged batch. scripts/get-cifar10 extracts into
  /// root/cifar-10-batches-bin, which is read only where root holds no batch of its own: then that folder
  /// must be named.
  static std::string how_to_get(const std::string& root) {
    namespace fs = std::filesystem;
    std::string how = "download and extract the binary version with `scripts/get-cifar10 " + root +
                      "` (https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz)";
    std::error_code ec;
    if (fs::exists(fs::path(root) / train_files_[0], ec) || fs::exists(fs::path(root) / test_files_[0], ec))
      how += ", then read " + (fs::path(root) / "cifar-10-batches-bin").string() + " (the batches " + root +
             " holds itself are read before that folder)";
    return how;
  }
  static std::string record_format() {
    return "records of " + std::to_string(record_bytes) + " bytes (1 label byte + " +
           std::to_string(image_bytes) + " pixel bytes)";
  }

  /// What `root` holds instead of the binary batches, for the message: the Python version (its batches
  /// are pickles, named data_batch_1 without .bin), or an archive not extracted; "" otherwise.
  static std::string found_instead(const std::string& root) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path dir(root);
    if (fs::is_directory(dir / "cifar-10-batches-py", ec) || fs::exists(dir / "data_batch_1", ec) ||
        fs::exists(dir / "test_batch", ec))
      return " (found the Python version of CIFAR-10, whose batches are pickles)";
    for (const char* archive : {"cifar-10-binary.tar.gz", "cifar-10-python.tar.gz"})
      if (fs::exists(dir / archive, ec)) return std::string(" (found ") + archive + ", not extracted)";
    return "";
  }
  /// The number of records in `file`, after checking it exists and holds a whole, non-zero number of them.
  static std::uintmax_t check_size(const std::filesystem::path& file, const std::string& root) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const auto status = fs::status(file, ec);
    if (!fs::exists(status))
      throw DataError(file.string(), "byte 0", "no such file" + found_instead(root),
                      "the CIFAR-10 binary batch " + file.filename().string() + "; " + how_to_get(root));
    if (!fs::is_regular_file(status))
      throw DataError(file.string(), "byte 0", "not a regular file",
                      "the CIFAR-10 binary batch " + file.filename().string() + "; " + how_to_get(root));
    const std::uintmax_t bytes = fs::file_size(file, ec);
    if (ec)
      throw DataError(file.string(), "byte 0", "cannot read its size (" + ec.message() + ")",
                      "a readable CIFAR-10 binary batch");
    if (bytes == 0) throw DataError(file.string(), "byte 0", "empty file", record_format());
    if (bytes % record_bytes != 0) {
      const std::uintmax_t whole = bytes / record_bytes;
      throw DataError(file.string(), detail::byte_position(whole * record_bytes),
                      "file size " + std::to_string(bytes) + " bytes ends in a partial record of " +
                          std::to_string(bytes - whole * record_bytes) + " bytes after " +
                          std::to_string(whole) + " whole records",
                      "a whole number of " + record_format());
    }
    return bytes / record_bytes;
  }

  /// Decodes `count` records of `file` into labels_[first...] and images_[first * 3072...].
  void read_file(const std::filesystem::path& file, std::size_t first, std::size_t count) {
    std::ifstream in(file, std::ios::binary);
    if (!in)
      throw DataError(file.string(), "byte 0", "cannot open the file", "a readable CIFAR-10 binary batch");
    for (std::size_t r = 0; r < count; ++r) {
      const std::uint64_t offset = static_cast<std::uint64_t>(r) * record_bytes;
      char label = 0;
      if (!in.read(&label, 1))
        throw DataError(file.string(), detail::byte_position(offset),
                        "read failed (the file shrank while reading?)", record_format());
      const auto value = static_cast<unsigned char>(label);
      if (value >= num_classes)
        throw DataError(
            file.string(), detail::byte_position(offset),
            "label " + std::to_string(value) + " in record " + std::to_string(r),
            "a label byte 0-9 at the start of each " + std::to_string(record_bytes) + "-byte record");
      labels_[first + r] = value;
      auto* dst = reinterpret_cast<char*>(images_.data() + (first + r) * image_bytes);
      if (!in.read(dst, static_cast<std::streamsize>(image_bytes)))
        throw DataError(file.string(),
                        detail::byte_position(offset + 1 + static_cast<std::uint64_t>(in.gcount())),
                        "read failed after " + std::to_string(in.gcount()) + " of " +
                            std::to_string(image_bytes) + " pixel bytes (the file shrank while reading?)",
                        record_format());
    }
  }

  bool train_;
  std::string directory_;
  std::vector<std::uint8_t> labels_;
  std::vector<std::uint8_t> images_;
};

}  // namespace kiln::data
