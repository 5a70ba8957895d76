/// MNIST and Fashion-MNIST: the four IDX files of a split, decoded once and kept in memory.
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "kiln/data/dataset.hpp"
#include "kiln/data/error.hpp"
#include "kiln/data/idx.hpp"
#include "kiln/tensor/shape.hpp"

namespace kiln::data {

/// A split of MNIST or Fashion-MNIST from `root` (train: train-images-idx3-ubyte, train-labels-idx1-ubyte;
/// test: t10k-...; each plain or .gz). Samples are [1, 28, 28] floats in [0, 1] (byte / 255, as
/// torchvision's ToTensor) and an int64 class in [0, 10). `limit` >= 0 keeps the first `limit` samples.
/// Debian's dataset-fashion-mnist package installs Fashion-MNIST in /usr/share/datasets/fashion-mnist.
class Mnist {
 public:
  using sample_shape = Shape<1, 28, 28>;
  using target_type = std::int64_t;
  using target_shape = Shape<>;
  static constexpr index_t pixels = 28 * 28;

  Mnist(const std::string& root, bool train, index_t limit = -1) {
    const std::string prefix = train ? "train" : "t10k";
    images_path_ = find(root, prefix + "-images-idx3-ubyte");
    labels_path_ = find(root, prefix + "-labels-idx1-ubyte");
    IdxArray images = read_idx(images_path_, 3);
    IdxArray labels = read_idx(labels_path_, 1);
    if (images.dims[1] != 28 || images.dims[2] != 28)
      throw DataError(images_path_, images.dims[1] != 28 ? "byte 8" : "byte 12", "images of " + std::to_string(images.dims[1]) + " x " + std::to_string(images.dims[2]),
                      "28 x 28 images");
    if (images.count() == 0)  // refused here, where the file is known, not by the sampler of an empty dataset
      throw DataError(images_path_, "byte 4", "0 images", "at least one image");
    if (images.count() != labels.count())
      throw DataError(labels_path_, "byte 4",
                      std::to_string(labels.count()) + " labels for " + std::to_string(images.count()) + " images in " +
                          images_path_,
                      "as many labels as images");
    for (std::size_t i = 0; i < labels.values.size(); ++i)
      if (labels.values[i] > 9)
        throw DataError(labels_path_, "byte " + std::to_string(8 + i), "label " + std::to_string(labels.values[i]),
                        "a class in [0, 9]");
    count_ = limit >= 0 && limit < images.count() ? limit : images.count();
    images_ = std::move(images.values);
    labels_ = std::move(labels.values);
    images_.resize(static_cast<std::size_t>(count_ * pixels));
    labels_.resize(static_cast<std::size_t>(count_));
    images_.shrink_to_fit();  // a limit keeps only its samples (not the whole file's 47 MB)
    labels_.shrink_to_fit();
  }

  index_t size() const { return count_; }
  void read(index_t i, std::span<float> x, std::span<std::int64_t> y) const {
    detail::check_read("kiln::data::Mnist::read", i, size(), x.size(), pixels, y.size(), 1);
    const std::uint8_t* p = images_.data() + i * pixels;
    for (index_t k = 0; k < pixels; ++k) x[static_cast<std::size_t>(k)] = static_cast<float>(p[k]) / 255.0f;  // as ToTensor: div(255)
    y[0] = labels_[static_cast<std::size_t>(i)];
  }
  /// Sample i as its stored bytes (0-255; Bytes<Mnist> reads through this).
  void read_bytes(index_t i, std::span<std::uint8_t> x, std::span<std::int64_t> y) const {
    detail::check_read("kiln::data::Mnist::read_bytes", i, size(), x.size(), pixels, y.size(), 1);
    const std::uint8_t* p = images_.data() + i * pixels;
    for (index_t k = 0; k < pixels; ++k) x[static_cast<std::size_t>(k)] = p[k];
    y[0] = labels_[static_cast<std::size_t>(i)];
  }
  /// The raw bytes: images [N, 28, 28] and labels [N].
  const std::vector<std::uint8_t>& images() const { return images_; }
  const std::vector<std::uint8_t>& labels() const { return labels_; }
  const std::string& images_path() const { return images_path_; }

  static constexpr std::array<const char*, 10> fashion_classes = {
      "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

 private:
  static std::string find(const std::string& root, const std::string& name) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (const auto status = fs::status(root, ec); !fs::is_directory(status)) {
      // One of the files itself (--data .../train-images-idx3-ubyte.gz): its folder is what is meant.
      const fs::path folder = fs::path(root).parent_path();
      const std::string pass_folder =
          fs::is_regular_file(status) ? "; pass its folder, " + (folder.empty() ? std::string(".") : folder.string())
                                      : std::string();
      throw DataError(root, "directory", fs::exists(status) ? "not a directory" : "no such directory",
                      "a directory holding the IDX files of MNIST or Fashion-MNIST (" + name +
                          "[.gz], ...; Debian: apt-get install dataset-fashion-mnist, in "
                          "/usr/share/datasets/fashion-mnist)" + pass_folder);
    }
    for (const std::string& candidate : {name, name + ".gz"}) {
      const fs::path p = fs::path(root) / candidate;
      if (fs::exists(p, ec)) return p.string();
    }
    throw DataError((std::filesystem::path(root) / name).string(), "byte 0",
                    "no such file (nor " + name + ".gz)" + (ec ? " (" + ec.message() + ")" : std::string()),
                    "the IDX files of MNIST or Fashion-MNIST in " + root +
                        " (Debian: apt-get install dataset-fashion-mnist, in /usr/share/datasets/fashion-mnist)");
  }

  std::string images_path_, labels_path_;
  index_t count_ = 0;
  std::vector<std::uint8_t> images_;
  std::vector<std::uint8_t> labels_;
};

/// Fashion-MNIST has MNIST's format (Mnist::fashion_classes names its classes).
using FashionMnist = Mnist;

}  // namespace kiln::data
