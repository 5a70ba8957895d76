// DeviceLoader: a loader's batches on a device, scaled and normalised there in one pass. Bytes through
// the loader + ScaleNormalize{255, mean, std} on the device give the batches of a float loader with
// Normalize on the host, bit for bit, through shuffling, workers and byte-wise crops and flips.
// Compiled for kiln::Cpu here and, through tests/cuda/data, for kiln::Cuda (copy stream and events).
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <kiln/data/data.hpp>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "support/policies.hpp"

namespace {
namespace kd = kiln::data;
using kiln::index_t;
using kiln::Shape;

/// Images [3, 4, 5] of bytes (with 0 and 255 among them) and a class each; read() gives bytes / 255 as
/// Mnist and Cifar10 do, read_bytes() the bytes.
struct ByteImages {
  using sample_shape = Shape<3, 4, 5>;
  using target_type = std::int64_t;
  using target_shape = Shape<>;
  static constexpr index_t numel = 60;
  index_t count = 37;
  std::uint8_t byte(index_t i, index_t k) const {
    return static_cast<std::uint8_t>(k == 0 ? 0 : k == 1 ? 255 : (i * 37 + k * 11 + (i * k) % 7) & 255);
  }
  index_t size() const { return count; }
  void read(index_t i, std::span<float> x, std::span<std::int64_t> y) const {
    for (index_t k = 0; k < numel; ++k) x[static_cast<std::size_t>(k)] = static_cast<float>(byte(i, k)) / 255.0f;
    y[0] = i % 10;
  }
  void read_bytes(index_t i, std::span<std::uint8_t> x, std::span<std::int64_t> y) const {
    for (index_t k = 0; k < numel; ++k) x[static_cast<std::size_t>(k)] = byte(i, k);
    y[0] = i % 10;
  }
};
static_assert(kd::byte_dataset<ByteImages>);
static_assert(kd::dataset<kd::Bytes<ByteImages>>);

const std::vector<float> means{0.25f, 0.5f, 0.75f}, stds{0.5f, 0.2f, 0.3f};

template <class T, class S, class D>
std::vector<T> host(const kiln::Tensor<T, S, D>& t) {
  return t.to_vector();
}

/// Every batch of one epoch of `a` (host batches) and `b` (device batches) agrees bit for bit.
template <class A, class B>
void same_epoch(A& a, B& b, const std::string& what) {
  std::vector<std::vector<float>> xs;
  std::vector<std::vector<std::int64_t>> ys;
  std::vector<index_t> indices;
  for (const auto& batch : a) {
    xs.push_back(host(batch.x));
    ys.push_back(host(batch.y));
    indices.push_back(batch.index);
  }
  std::size_t k = 0;
  for (const auto& batch : b) {
    BOOST_REQUIRE_MESSAGE(k < xs.size(), what << ": more device batches than host ones");
    BOOST_TEST(batch.index == indices[k]);
    BOOST_TEST(batch.size() == static_cast<index_t>(ys[k].size()));
    BOOST_TEST(host(batch.x) == xs[k], boost::test_tools::per_element());
    BOOST_TEST(host(batch.y) == ys[k], boost::test_tools::per_element());
    ++k;
  }
  BOOST_TEST(k == xs.size(), what << ": " << k << " device batches for " << xs.size() << " host ones");
}
}  // namespace

BOOST_AUTO_TEST_SUITE(data)
BOOST_AUTO_TEST_SUITE(device_loader)

BOOST_AUTO_TEST_CASE_TEMPLATE(bytes_scaled_and_normalised_on_the_device_equal_floats_normalised_on_the_host, D,
                              kiln::test::devices) {
  const ByteImages images;
  const kd::Bytes bytes(images);
  const kd::LoaderOptions options{.batch_size = 8, .shuffle = true, .num_workers = 2, .seed = 5};
  using Augment = kd::Compose<kd::RandomCrop, kd::RandomHorizontalFlip>;
  kd::DataLoader floats(images, options,
                        kd::Compose<kd::RandomCrop, kd::RandomHorizontalFlip, kd::Normalize>(
                            kd::RandomCrop{.padding = 1}, kd::RandomHorizontalFlip{}, kd::Normalize{means, stds}));
  kd::DataLoader byte_loader(bytes, options, Augment(kd::RandomCrop{.padding = 1}, kd::RandomHorizontalFlip{}));
  kd::DeviceLoader<D, decltype(byte_loader)> on_device(byte_loader, {255.0f, means, stds});
  BOOST_TEST(on_device.size() == 5);  // 37 samples in batches of 8
  for (int epoch = 0; epoch < 2; ++epoch) same_epoch(floats, on_device, "epoch " + std::to_string(epoch));
  BOOST_TEST(on_device.epoch() == 2u);  // the loader's epochs count on through the DeviceLoader
}

/// A random_split of a byte dataset keeps its bytes: Bytes(split) and a Subset of Bytes give the float
/// split's batches, scaled and normalised on the device, bit for bit.
BOOST_AUTO_TEST_CASE_TEMPLATE(splits_of_a_byte_dataset_are_byte_datasets, D, kiln::test::devices) {
  const ByteImages images;
  static_assert(kd::byte_dataset<kd::Subset<ByteImages>>);
  static_assert(std::is_same_v<kd::sample_type_t<kd::Subset<kd::Bytes<ByteImages>>>, std::uint8_t>);
  const auto parts = kd::random_split(images, {0.75, 0.25}, 3);
  const kd::LoaderOptions options{.batch_size = 4, .shuffle = true, .seed = 2};
  kd::DataLoader floats(parts[1], options, kd::Normalize{means, stds});
  const kd::Bytes bytes(parts[1]);  // Bytes of a split
  kd::DataLoader byte_loader(bytes, options);
  kd::DeviceLoader<D, decltype(byte_loader)> on_device(byte_loader, {255.0f, means, stds});
  same_epoch(floats, on_device, "Bytes of a split");
  const kd::Bytes all_bytes(images);  // a split of Bytes
  const kd::Subset<kd::Bytes<ByteImages>> byte_part(all_bytes, parts[1].indices());
  kd::DataLoader byte_part_loader(byte_part, options);
  kd::DeviceLoader<D, decltype(byte_part_loader)> on_device_too(byte_part_loader, {255.0f, means, stds});
  floats.set_epoch(0);  // the order of the epoch above
  same_epoch(floats, on_device_too, "a split of Bytes");
  std::vector<std::uint8_t> x(60);
  std::vector<std::int64_t> y(1);
  BOOST_CHECK_EXCEPTION(parts[1].read_bytes(parts[1].size(), x, y), kiln::ValueError, [](const kiln::ValueError& e) {
    return std::string(e.what()).find("Subset::read_bytes: index 9 out of range") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(float_batches_with_divisor_one_are_the_normalize_transform, D, kiln::test::devices) {
  const ByteImages images{.count = 21};
  kd::DataLoader normalised(images, {.batch_size = 4}, kd::Normalize{means, stds});
  kd::DataLoader plain(images, {.batch_size = 4});
  kd::DeviceLoader<D, decltype(plain)> on_device(plain, {1.0f, means, stds});
  same_epoch(normalised, on_device, "float input");
  // No transform at all: the batches as they are.
  kd::DataLoader plain_again(images, {.batch_size = 4});
  kd::DeviceLoader<D, decltype(plain_again)> as_is(plain_again);
  same_epoch(plain, as_is, "identity");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(each_batch_is_one_pass_where_it_lands, D, kiln::test::devices) {
  const ByteImages images;
  const kd::Bytes bytes(images);
  kd::DataLoader loader(bytes, {.batch_size = 10, .num_workers = 1});
  kd::DeviceLoader<D, decltype(loader)> on_device(loader, {255.0f, {0.5f}, {0.5f}});
  const auto before = kiln::counters();
  index_t batches = 0, samples = 0;
  for (const auto& b : on_device) {
    ++batches;
    samples += b.size();
  }
  const auto work = kiln::counters() - before;
  BOOST_TEST(batches == 4);
  BOOST_TEST(samples == 37);
  BOOST_TEST(work.passes == 4u);                           // one scale-and-normalise pass per batch
  BOOST_TEST(work.bytes == 37u * 60u * (1u + 4u));         // each byte read once, each float written once
}

BOOST_AUTO_TEST_CASE_TEMPLATE(leaving_an_epoch_early_then_starting_another_works, D, kiln::test::devices) {
  const ByteImages images;
  const kd::Bytes bytes(images);
  kd::DataLoader loader(bytes, {.batch_size = 4, .shuffle = true, .num_workers = 2, .prefetch_factor = 1});
  kd::DeviceLoader<D, decltype(loader)> on_device(loader, {255.0f});
  int seen = 0;
  for (const auto& b : on_device) {
    BOOST_TEST(b.size() == 4);
    if (++seen == 2) break;  // a batch is still staged and the workers are running: both are dropped
  }
  on_device.set_epoch(0);  // epoch 0 again: the same order as the interrupted one
  kd::DataLoader reference(bytes, {.batch_size = 4, .shuffle = true});
  kd::DeviceLoader<kiln::Cpu, decltype(reference)> expected(reference, {255.0f});
  same_epoch(expected, on_device, "after an early exit");
}

BOOST_AUTO_TEST_CASE_TEMPLATE(assigning_a_device_batch_rebinds_it_and_leaves_copies_kept_elsewhere_alone, D,
                              kiln::test::devices) {
  // As a loader's batches: assignment shares the other batch's tensors instead of writing into the ones
  // held, so the short last batch (37 = 9 x 4 + 1) fits over a full one and a copy kept aside stays.
  const ByteImages images;
  const kd::Bytes bytes(images);
  kd::DataLoader loader(bytes, {.batch_size = 4});
  kd::DeviceLoader<D, decltype(loader)> on_device(loader, {255.0f});
  using Batch = typename decltype(on_device)::batch_type;
  std::vector<Batch> kept;
  Batch keep;
  for (const auto& b : on_device) {
    keep = b;
    if (b.index == 0) kept.push_back(keep);  // shares keep's tensors
    BOOST_TEST(keep.x.shares_storage_with(b.x));
    BOOST_TEST(kept[0].index == 0);
    BOOST_TEST(host(kept[0].y) == (std::vector<std::int64_t>{0, 1, 2, 3}), boost::test_tools::per_element());
  }
  BOOST_TEST(keep.index == 9);
  BOOST_TEST(keep.size() == 1);
  BOOST_TEST(host(keep.y) == (std::vector<std::int64_t>{6}), boost::test_tools::per_element());
  Batch moved;
  moved = std::move(keep);
  BOOST_TEST(moved.index == 9);
  BOOST_TEST(host(moved.y) == (std::vector<std::int64_t>{6}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bad_scale_and_normalise_settings_are_refused_when_made) {
  const ByteImages images;
  kd::DataLoader loader(images, {.batch_size = 4});
  using L = kd::DeviceLoader<kiln::Cpu, decltype(loader)>;
  BOOST_CHECK_EXCEPTION(L(loader, {1.0f, {0.1f, 0.2f}, {1.0f}}), kiln::ValueError, [](const kiln::ValueError& e) {
    return std::string(e.what()).find("2 means and 1 stds for 3 channels") != std::string::npos;
  });
  BOOST_CHECK_THROW(L(loader, {1.0f, {0.0f}, {0.0f}}), kiln::ValueError);  // std 0
  BOOST_CHECK_THROW(L(loader, {0.0f}), kiln::ValueError);                  // divisor 0
  BOOST_CHECK_NO_THROW(L(loader, {1.0f, {0.1f, 0.2f, 0.3f}, {1.0f}}));     // per channel and one value
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_flat_sample_wider_than_1024_features_takes_one_mean_and_std, D,
                              kiln::test::devices) {
  // Flat CIFAR-10 (3072 values): per-feature means and stds would not fit the kernel's arguments, so one
  // of each applies to every feature, as the Normalize transform with one value does; more are refused
  // when the DeviceLoader is made.
  std::vector<float> x(4 * 3072);
  std::vector<std::int64_t> y(4);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 251);
  const kd::TensorDataset<Shape<3072>> flat(std::vector<float>(x), std::move(y));
  kd::DataLoader loader(flat, {.batch_size = 2});
  kd::DeviceLoader<D, decltype(loader)> batches(loader, {2.0f, {0.5f}, {4.0f}});
  std::vector<float> got;
  for (const auto& b : batches) {
    const auto v = host(b.x);
    got.insert(got.end(), v.begin(), v.end());
  }
  std::vector<float> want;
  for (const float v : x) want.push_back((v / 2.0f - 0.5f) / 4.0f);
  BOOST_TEST(got == want, boost::test_tools::per_element());
  using L = kd::DeviceLoader<D, decltype(loader)>;
  BOOST_CHECK_EXCEPTION(
      L(loader, {1.0f, {0.1f, 0.2f}, {1.0f}}), kiln::ValueError, [](const kiln::ValueError& e) {
        return std::string(e.what()).find("2 means and 1 stds for 3072 channels (features)") !=
               std::string::npos;
      });
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
