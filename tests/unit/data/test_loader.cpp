// DataLoader, samplers and transforms: every sample once per epoch, a fresh order per epoch, batches
// that do not depend on num_workers for a seed, worker errors reach the reader in their batch's turn and
// stepping on after one gets the next batch (with or without workers), an early break does not hang;
// RandomSampler takes num_samples and replacement as PyTorch's; DistributedSampler pads and splits as
// PyTorch's (also set on a running loader); transforms do what torchvision's do.
#include <array>
#include <boost/test/unit_test.hpp>
#include <limits>
#include <thread>
#include <chrono>
#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <kiln/data/data.hpp>
#include <numeric>
#include <random>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "support/warnings.hpp"

namespace {
using kiln::index_t;
using kiln::Shape;
namespace kd = kiln::data;

/// n images [2, 3, 4] whose values encode (sample, position); label = sample.
kd::TensorDataset<Shape<2, 3, 4>> images(index_t n) {
  std::vector<float> x;
  std::vector<std::int64_t> y;
  for (index_t i = 0; i < n; ++i) {
    for (index_t k = 0; k < 24; ++k) x.push_back(static_cast<float>(i * 100 + k));
    y.push_back(i);
  }
  return {std::move(x), std::move(y)};
}

/// Every batch of one epoch, flattened: (labels, inputs).
template <class L>
std::pair<std::vector<std::int64_t>, std::vector<float>> epoch(L& loader) {
  std::pair<std::vector<std::int64_t>, std::vector<float>> out;
  for (const auto& b : loader) {
    const auto y = b.y.to_vector();
    const auto x = b.x.to_vector();
    out.first.insert(out.first.end(), y.begin(), y.end());
    out.second.insert(out.second.end(), x.begin(), x.end());
  }
  return out;
}

struct Throws {  // a dataset whose sample 13 cannot be read
  using sample_shape = Shape<1>;
  using target_type = std::int64_t;
  using target_shape = Shape<>;
  index_t size() const { return 40; }
  void read(index_t i, std::span<float> x, std::span<std::int64_t> y) const {
    if (i == 13) throw kd::DataError("throws.bin", "byte 13", "broken sample", "a readable sample");
    x[0] = static_cast<float>(i);
    y[0] = i;
  }
};

/// Throws, with sample 0 slow to read: another worker reaches the broken batch first.
struct SlowThenThrows : Throws {
  void read(index_t i, std::span<float> x, std::span<std::int64_t> y) const {
    if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    Throws::read(i, x, y);
  }
};

/// The batches a loop over `loader` sees before it throws kd::DataError (-1: it did not throw).
template <class L>
int batches_before_the_error(L& loader) {
  int seen = 0;
  try {
    for (const auto& b : loader) {
      BOOST_TEST(b.index == seen);
      ++seen;
    }
  } catch (const kd::DataError&) {
    return seen;
  }
  return -1;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(data)
BOOST_AUTO_TEST_SUITE(loader)

BOOST_AUTO_TEST_CASE(every_batch_before_a_failing_one_is_handed_out_first) {
  // Sample 13 is in batch 3 (batches of 4): batches 0, 1 and 2 reach the loop, then the error, whatever
  // the worker count, even when a worker fails while batch 0 is still being read; the DeviceLoader too.
  const SlowThenThrows ds;
  for (int workers : {0, 1, 2, 3}) {
    BOOST_TEST_CONTEXT(workers << " workers") {
      kd::DataLoader loader(ds, {.batch_size = 4, .num_workers = workers});
      BOOST_TEST(batches_before_the_error(loader) == 3);
      kd::DataLoader again(ds, {.batch_size = 4, .num_workers = workers});
      kd::DeviceLoader<kiln::Cpu, decltype(again)> on_device(again);
      BOOST_TEST(batches_before_the_error(on_device) == 3);
    }
  }
}

/// Steps through one epoch by hand, catching each batch's error and stepping on, as a torch loop that
/// catches the error of next(it) and goes on: the batch indices seen, and -1 for each batch that threw.
/// A failed batch throws where it is read (*it, it->) and counts as a step: the loop ends after the
/// epoch's last batch, failed or not.
template <class L>
std::vector<index_t> step_through_errors(L& loader) {
  std::vector<index_t> seen;
  for (auto it = loader.begin(); it != loader.end(); ++it) {
    try {
      seen.push_back(it->index);
    } catch (const kd::DataError&) {
      seen.push_back(-1);
    }
    if (seen.size() > 2 * static_cast<std::size_t>(loader.size())) break;  // (an epoch that never ends)
  }
  return seen;
}

BOOST_AUTO_TEST_CASE(stepping_on_after_a_failed_batch_gets_the_next_whatever_the_worker_count) {
  // Samples 13, 21, 25 and 39 cannot be read: batches 3, 5, 6 and 9 (of 4; two in a row, and the last)
  // throw in their turn, the others come out in order, as with torch's iterator after the error; with
  // workers that reach the broken batches long before the reader (a slow first sample) or just in time,
  // with a window of one batch or many, and through a DeviceLoader.
  struct FourBroken : SlowThenThrows {
    void read(index_t i, std::span<float> x, std::span<std::int64_t> y) const {
      if (i == 21 || i == 25 || i == 39)
        throw kd::DataError("throws.bin", "byte " + std::to_string(i), "broken sample", "a readable sample");
      SlowThenThrows::read(i, x, y);
    }
  };
  const FourBroken ds;
  const std::vector<index_t> want = {0, 1, 2, -1, 4, -1, -1, 7, 8, -1};
  for (int workers : {0, 1, 2, 3}) {
    for (int prefetch : {1, 2, 4}) {
      if (workers == 0 && prefetch != 2) continue;
      BOOST_TEST_CONTEXT(workers << " workers, prefetch " << prefetch) {
        kd::DataLoader loader(ds, {.batch_size = 4, .num_workers = workers, .prefetch_factor = prefetch});
        BOOST_TEST(step_through_errors(loader) == want, boost::test_tools::per_element());
        kd::DeviceLoader<kiln::Cpu, decltype(loader)> on_device(loader);
        BOOST_TEST(step_through_errors(on_device) == want, boost::test_tools::per_element());
        BOOST_CHECK_THROW(epoch(loader), kd::DataError);  // a plain loop still ends at the first error
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(sequential_batches_in_order_with_a_short_last_batch) {
  const auto ds = images(10);
  kd::DataLoader loader(ds, {.batch_size = 4});
  BOOST_TEST(loader.size() == 3);
  std::vector<index_t> sizes;
  for (const auto& b : loader) sizes.push_back(b.size());
  BOOST_TEST(sizes == (std::vector<index_t>{4, 4, 2}), boost::test_tools::per_element());
  const auto [labels, x] = epoch(loader);
  std::vector<std::int64_t> want(10);
  std::iota(want.begin(), want.end(), 0);
  BOOST_TEST(labels == want, boost::test_tools::per_element());
  BOOST_TEST(x[24 * 7 + 5] == 705.0f);
  kd::DataLoader dropping(ds, {.batch_size = 4, .drop_last = true});
  BOOST_TEST(dropping.size() == 2);
  BOOST_TEST(epoch(dropping).first.size() == 8u);
  // A batch larger than the dataset is one batch (n + batch_size - 1 overflowed for INT64_MAX: 0 batches).
  kd::DataLoader whole(ds, {.batch_size = std::numeric_limits<index_t>::max()});
  BOOST_TEST(whole.size() == 1);
  BOOST_TEST(epoch(whole).first.size() == 10u);
  // drop_last over fewer samples than a batch: no batch, as torch (which says nothing); kiln warns once.
  const kiln::test::CollectWarnings w;
  kd::DataLoader none(ds, {.batch_size = std::numeric_limits<index_t>::max(), .drop_last = true});
  BOOST_TEST(none.size() == 0);
  BOOST_TEST(w.count() == 1u);
  BOOST_TEST(w.messages().at(0) == "kiln::data::DataLoader: drop_last with batch_size " +
                                       std::to_string(std::numeric_limits<index_t>::max()) +
                                       " over 10 samples an epoch drops them all: every epoch is empty");
  BOOST_TEST(epoch(none).first.empty());
  kd::DataLoader dropping_some(ds, {.batch_size = 10, .drop_last = true});
  BOOST_TEST(w.count() == 1u);  // one whole batch: nothing to say
  dropping_some.set_sampler(kd::DistributedSampler{.world_size = 2, .rank = 0});  // 5 samples a rank
  BOOST_TEST(w.count() == 2u);
  BOOST_TEST(w.messages().at(1) ==
             "kiln::data::DataLoader: drop_last with batch_size 10 over 5 samples an epoch drops them all: every "
             "epoch is empty");
  // Once per loader: the DDP loop sets the sampler again each epoch (examples/common/epoch.hpp).
  for (std::uint64_t e = 1; e <= 3; ++e)
    dropping_some.set_sampler(kd::DistributedSampler{.world_size = 2, .rank = 0, .seed = e});
  none.set_sampler(kd::SequentialSampler{});
  BOOST_TEST(w.count() == 2u);
}

BOOST_AUTO_TEST_CASE(a_batch_binds_as_x_and_y_like_torchs_for_x_y_in_loader) {
  // `for (auto [x, y] : loader)` binds the inputs and the targets, sharing the batch's tensors; the
  // index stays a member. A batch is tuple-like with two elements, const or not.
  const auto ds = images(6);
  kd::DataLoader loader(ds, {.batch_size = 4});
  using B = decltype(loader)::batch_type;
  static_assert(std::tuple_size_v<B> == 2 && std::tuple_size_v<const B> == 2);
  static_assert(std::is_same_v<std::tuple_element_t<0, B>, decltype(B::x)> &&
                std::is_same_v<std::tuple_element_t<1, const B>, const decltype(B::y)>);
  std::vector<std::int64_t> labels;
  std::vector<index_t> rows;
  for (auto [x, y] : loader) {
    rows.push_back(x.size(0));
    for (const auto label : y.to_vector()) labels.push_back(label);
  }
  BOOST_TEST(rows == (std::vector<index_t>{4, 2}), boost::test_tools::per_element());
  BOOST_TEST(labels == (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5}), boost::test_tools::per_element());
  for (const auto& b : loader) {
    const auto& [x, y] = b;
    BOOST_TEST(x.shares_storage_with(b.x));
    BOOST_TEST(&y == &b.y);
    BOOST_TEST(x[24] == static_cast<float>(b.index * 400 + 100), "sample " << b.index * 4 + 1 << "'s first value");
    auto [mx, my] = B(b);  // from an rvalue batch
    BOOST_TEST(my.shares_storage_with(b.y));
    (void)mx;
  }
}

BOOST_AUTO_TEST_CASE(a_tensor_dataset_is_made_from_tensors_as_torchs) {
  // TensorDataset(x, y) from tensors [N, sample...] and [N, target...] holds their values, row by row,
  // as the one from vectors; rows that differ are a ValueError (torch: "Size mismatch between tensors").
  const auto from_vectors = images(5);
  const auto x = kiln::Tensor<float, Shape<kiln::dyn, 2, 3, 4>>::from(std::span<const float>(from_vectors.inputs()),
                                                                      kiln::Extents<Shape<kiln::dyn, 2, 3, 4>>(5));
  const auto y = kiln::Tensor<std::int64_t, Shape<5>>::from({0, 1, 2, 3, 4});
  const kd::TensorDataset<Shape<2, 3, 4>> ds(x, y);
  BOOST_TEST(ds.size() == 5);
  BOOST_TEST(ds.inputs() == from_vectors.inputs(), boost::test_tools::per_element());
  BOOST_TEST(ds.targets() == from_vectors.targets(), boost::test_tools::per_element());
  const auto four = kiln::Tensor<std::int64_t, Shape<4>>::from({0, 1, 2, 3});
  BOOST_CHECK_EXCEPTION((kd::TensorDataset<Shape<2, 3, 4>>(x, four)), kiln::ValueError, [](const kiln::ValueError& e) {
    return std::string(e.what()).find("x has 5 rows and y 4") != std::string::npos;
  });
  // Regression targets [N, 1]: as the CSV dataset's.
  const auto values = kiln::Tensor<float, Shape<5, 1>>::from({0.5f, 1.5f, 2.5f, 3.5f, 4.5f});
  const kd::TensorDataset<Shape<2, 3, 4>, float, Shape<1>> regression(x, values);
  BOOST_TEST(kd::get(regression, 3).y == (std::vector<float>{3.5f}), boost::test_tools::per_element());
  BOOST_TEST(kd::get(regression, 3).x[1] == 301.0f);
}

BOOST_AUTO_TEST_CASE(a_batch_copies_into_a_tensor_with_only_the_data_header) {
  // <kiln/data/data.hpp> is kiln::data in one include: clone, fill and a tensor's copy-assignment
  // (kiln::assign) link with no other kiln header, as in this file.
  const auto ds = images(4);
  kd::DataLoader loader(ds, {.batch_size = 4});
  for (const auto& b : loader) {
    auto values = b.y.clone();
    values.fill(7);
    BOOST_TEST(values.to_vector() == (std::vector<std::int64_t>{7, 7, 7, 7}),
               boost::test_tools::per_element());
    values = b.y;
    BOOST_TEST(values.to_vector() == (std::vector<std::int64_t>{0, 1, 2, 3}),
               boost::test_tools::per_element());
    BOOST_TEST(!values.shares_storage_with(b.y));
  }
}

BOOST_AUTO_TEST_CASE(a_short_last_batch_can_be_assigned_over_a_full_one) {
  // Assigning a batch rebinds it to the other's tensors, as copying one does (and as libtorch's tensors
  // do): the full batch held before is not written into, so the short last one fits.
  const auto ds = images(10);
  kd::DataLoader loader(ds, {.batch_size = 4, .num_workers = 2});
  decltype(loader)::batch_type keep;
  for (const auto& b : loader) {
    keep = b;
    BOOST_TEST(keep.x.shares_storage_with(b.x));
    BOOST_TEST(keep.y.shares_storage_with(b.y));
  }
  BOOST_TEST(keep.index == 2);
  BOOST_TEST(keep.size() == 2);
  BOOST_TEST(keep.y.to_vector() == (std::vector<std::int64_t>{8, 9}), boost::test_tools::per_element());
  decltype(loader)::batch_type moved;
  moved = std::move(keep);
  BOOST_TEST(moved.index == 2);
  BOOST_TEST(moved.y.to_vector() == (std::vector<std::int64_t>{8, 9}), boost::test_tools::per_element());
  BOOST_TEST(keep.x.empty());  // moved from, as a tensor is
}

BOOST_AUTO_TEST_CASE(assigning_a_batch_leaves_a_copy_kept_elsewhere_as_it_was) {
  const auto ds = images(8);
  kd::DataLoader loader(ds, {.batch_size = 4});
  std::vector<decltype(loader)::batch_type> kept;
  auto it = loader.begin();
  decltype(loader)::batch_type prev = *it;
  kept.push_back(prev);  // shares prev's tensors
  ++it;
  prev = *it;  // rebinds prev; kept[0] still holds batch 0
  BOOST_TEST(prev.index == 1);
  BOOST_TEST(prev.y.to_vector() == (std::vector<std::int64_t>{4, 5, 6, 7}), boost::test_tools::per_element());
  BOOST_TEST(kept[0].index == 0);
  BOOST_TEST(kept[0].y.to_vector() == (std::vector<std::int64_t>{0, 1, 2, 3}),
             boost::test_tools::per_element());
  BOOST_TEST(kept[0].x.to_vector()[24 * 3 + 5] == 305.0f);
}

BOOST_AUTO_TEST_CASE(shuffle_visits_every_sample_once_in_a_fresh_order_each_epoch) {
  const auto ds = images(50);
  kd::DataLoader loader(ds, {.batch_size = 8, .shuffle = true, .seed = 3});
  const auto e0 = epoch(loader).first, e1 = epoch(loader).first;
  for (const auto& e : {e0, e1}) {
    BOOST_TEST(std::set<std::int64_t>(e.begin(), e.end()).size() == 50u);
    BOOST_TEST(e.size() == 50u);
  }
  BOOST_TEST(e0 != e1);
  loader.set_epoch(0);
  BOOST_TEST(epoch(loader).first == e0);  // epoch 0 again: the same order
  kd::DataLoader other_seed(ds, {.batch_size = 8, .shuffle = true, .seed = 4});
  BOOST_TEST(epoch(other_seed).first != e0);
}

BOOST_AUTO_TEST_CASE(batches_do_not_depend_on_the_worker_count) {
  const auto ds = images(37);
  using T = kd::Compose<kd::RandomCrop, kd::RandomHorizontalFlip, kd::Normalize>;
  const T t(kd::RandomCrop{.padding = 1}, kd::RandomHorizontalFlip{}, kd::Normalize{{1.0f, 2.0f}, {2.0f, 4.0f}});
  std::vector<std::pair<std::vector<std::int64_t>, std::vector<float>>> runs;
  for (int workers : {0, 1, 3}) {
    kd::DataLoader loader(ds, {.batch_size = 5, .shuffle = true, .num_workers = workers, .prefetch_factor = 2, .seed = 9}, t);
    (void)epoch(loader);  // epoch 0
    runs.push_back(epoch(loader));  // epoch 1
  }
  BOOST_TEST(runs[0].first == runs[1].first);
  BOOST_TEST(runs[0].first == runs[2].first);
  BOOST_TEST(runs[0].second == runs[1].second);
  BOOST_TEST(runs[0].second == runs[2].second);
}

BOOST_AUTO_TEST_CASE(an_epoch_in_flight_outlives_its_loader) {
  // The workers collate ahead while the program runs: a loader replaced meanwhile (here by another in the
  // same storage, as a std::vector of loaders that grows) leaves them what they read, as torch's
  // iterator keeps its loader; only the dataset must outlive the epoch. They read the new one's dataset
  // and batch size before (the batches past the first window were another dataset's).
  const auto ds = images(40), other = images(80);
  kd::DataLoader reference(ds, {.batch_size = 2});
  const auto want = epoch(reference);
  std::optional<kd::DataLoader<decltype(ds)>> loader(std::in_place, ds,
                                                     kd::LoaderOptions{.batch_size = 2, .num_workers = 2});
  std::vector<std::int64_t> labels;
  std::vector<float> inputs;
  auto it = loader->begin();
  loader.emplace(other, kd::LoaderOptions{.batch_size = 3, .num_workers = 2});
  for (; it != std::default_sentinel; ++it) {
    const auto y = it->y.to_vector();
    const auto x = it->x.to_vector();
    labels.insert(labels.end(), y.begin(), y.end());
    inputs.insert(inputs.end(), x.begin(), x.end());
  }
  BOOST_TEST(labels == want.first, boost::test_tools::per_element());
  BOOST_TEST(inputs == want.second, boost::test_tools::per_element());
  auto next = loader->begin();  // and the new loader is the new one
  BOOST_TEST(next->y.to_vector() == (std::vector<std::int64_t>{0, 1, 2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_huge_prefetch_window_over_a_few_batches_allocates_only_what_they_need) {
  // 8 workers x 2^28 batches ahead over 3 batches: the window (2^31 slots, hundreds of GB) is cut to the
  // epoch's batches and only as many workers start; the batches are those of no workers at all.
  const auto ds = images(5);
  kd::DataLoader loader(ds, {.batch_size = 2, .num_workers = 8, .prefetch_factor = 1 << 28});
  kd::DataLoader inline_loader(ds, {.batch_size = 2});
  const auto got = epoch(loader);
  BOOST_TEST(got.first == (std::vector<std::int64_t>{0, 1, 2, 3, 4}), boost::test_tools::per_element());
  BOOST_TEST(got.second == epoch(inline_loader).second, boost::test_tools::per_element());
  kd::DataLoader none(ds, {.batch_size = 8, .drop_last = true, .num_workers = 8, .prefetch_factor = 1 << 28});
  BOOST_TEST(epoch(none).first.empty());  // no batches: no workers
}

BOOST_AUTO_TEST_CASE(a_worker_error_reaches_the_reader_and_an_early_break_does_not_hang) {
  const Throws ds;
  for (int workers : {0, 2}) {
    kd::DataLoader loader(ds, {.batch_size = 4, .num_workers = workers});
    BOOST_CHECK_EXCEPTION(epoch(loader), kd::DataError, [](const kd::DataError& e) {
      return std::string(e.what()).find("throws.bin: byte 13: broken sample") != std::string::npos;
    });
  }
  const auto ok = images(100);
  kd::DataLoader loader(ok, {.batch_size = 2, .num_workers = 2, .prefetch_factor = 1});
  int seen = 0;
  for (const auto& b : loader) {
    if (++seen == 3) break;
    (void)b;
  }
  BOOST_TEST(seen == 3);
  BOOST_CHECK_THROW(kd::DataLoader(ok, {.batch_size = 0}), kiln::ValueError);
}

/// Writes a draw of the sample's random stream into its first value (which stream a sample gets).
struct Draw {
  template <class S, class E>
  void apply(std::span<E> x, kd::SampleRng& rng) const {
    x[0] = static_cast<E>(rng.below(1 << 20));
  }
};

BOOST_AUTO_TEST_CASE(ranks_of_a_distributed_sampler_draw_the_augmentations_of_their_places_in_the_epoch) {
  // Rank r's k-th sample is place k * world_size + r of the epoch over all ranks: its random stream is the
  // one a single process gives that place, so two ranks do not crop and flip their batches alike.
  const auto ds = images(10);
  kd::DataLoader<kd::TensorDataset<Shape<2, 3, 4>>, Draw> single(ds, {.batch_size = 5}, Draw{});
  const auto whole = epoch(single).second;
  std::vector<std::vector<float>> draws(2);
  for (int r = 0; r < 2; ++r) {
    kd::DataLoader<kd::TensorDataset<Shape<2, 3, 4>>, Draw> part(
        ds, kd::DistributedSampler{.world_size = 2, .rank = r, .shuffle = false}, {.batch_size = 5}, Draw{});
    const auto got = epoch(part).second;
    BOOST_REQUIRE(got.size() == 5u * 24u);
    for (std::size_t k = 0; k < 5; ++k) {
      draws[static_cast<std::size_t>(r)].push_back(got[k * 24]);
      BOOST_TEST(got[k * 24] == whole[(2 * k + static_cast<std::size_t>(r)) * 24], "rank " << r << ", sample " << k);
    }
  }
  BOOST_TEST(draws[0] != draws[1]);
}

BOOST_AUTO_TEST_CASE(an_error_in_batch_0_is_read_in_its_turn_and_the_epoch_counts) {
  // Batch 0 cannot be made: begin() does not throw, reading batch 0 does (torch's iter(loader) is made,
  // its first next() raises), ++it gives batch 1, and the epoch counts: a loop that catches the error
  // and starts again runs the next epoch, in a new order when shuffled (it ran the same one forever).
  const Throws ds;  // sample 13
  for (int workers : {0, 2}) {
    BOOST_TEST_CONTEXT(workers << " workers") {
      kd::DataLoader loader(ds, {.batch_size = 20, .num_workers = workers});
      auto it = loader.begin();
      BOOST_TEST(loader.epoch() == 1u);
      BOOST_TEST((it != loader.end()));
      BOOST_CHECK_THROW((void)*it, kd::DataError);
      BOOST_CHECK_THROW((void)it->index, kd::DataError);  // as often as it is read
      ++it;
      BOOST_TEST(it->index == 1);
      ++it;
      BOOST_TEST((it == loader.end()));
      BOOST_CHECK_THROW((void)*it, kiln::ValueError);  // past the end: said, not undefined

      kd::DataLoader shuffled(ds, {.batch_size = 4, .shuffle = true, .num_workers = workers, .seed = 3});
      std::set<std::int64_t> first_batches;
      for (int attempt = 0; attempt < 4; ++attempt) {
        try {
          for (const auto& b : shuffled) {
            first_batches.insert(b.y.to_vector()[0]);
            break;
          }
        } catch (const kd::DataError&) {
        }
      }
      BOOST_TEST(shuffled.epoch() == 4u);
      BOOST_TEST(first_batches.size() >= 3u);  // four epochs, four orders (one may start with sample 13)
    }
  }
}

BOOST_AUTO_TEST_CASE(a_dataset_of_negative_size_is_refused) {
  // torch's len(loader) raises for a __len__ below 0; the loader said 0 batches, then std::length_error.
  struct Negative : Throws {
    index_t size() const { return -3; }
  };
  const Negative ds;
  const auto refused = [](const kiln::ValueError& e) {
    return std::string(e.what()).find("size() is -3; it must be >= 0") != std::string::npos;
  };
  BOOST_CHECK_EXCEPTION(kd::DataLoader(ds, {.batch_size = 2}), kiln::ValueError, refused);
  BOOST_CHECK_EXCEPTION(kd::DataLoader(ds, {.batch_size = 2, .shuffle = true}), kiln::ValueError, refused);
  const kd::DistributedSampler rank0{.world_size = 2, .rank = 0};
  BOOST_CHECK_EXCEPTION(kd::DataLoader(ds, rank0, {.batch_size = 2}), kiln::ValueError, refused);
}

BOOST_AUTO_TEST_CASE(options_torch_rejects_are_rejected) {
  // As torch.utils.data.DataLoader: a sampler and shuffle together, prefetch_factor below 1, and (torch
  // 1.13) a prefetch_factor without worker threads.
  const auto ds = images(8);
  const auto says = [](std::string part) {
    return [part](const kiln::ValueError& e) { return std::string(e.what()).find(part) != std::string::npos; };
  };
  BOOST_CHECK_EXCEPTION(kd::DataLoader(ds, kd::RandomSampler{3}, {.batch_size = 2, .shuffle = true}), kiln::ValueError,
                        says("a sampler and shuffle = true"));
  BOOST_CHECK_EXCEPTION(kd::DataLoader(ds, {.batch_size = 2, .num_workers = 2, .prefetch_factor = 0}), kiln::ValueError,
                        says("prefetch_factor is 0; it must be >= 1"));
  BOOST_CHECK_EXCEPTION(kd::DataLoader(ds, {.batch_size = 2, .prefetch_factor = 4}), kiln::ValueError,
                        says("needs worker threads"));
  kd::DataLoader fine(ds, kd::RandomSampler{3}, {.batch_size = 2});
  BOOST_TEST(fine.size() == 4);
}

BOOST_AUTO_TEST_CASE(pin_memory_without_a_gpu_is_ignored) {
  const auto ds = images(6);
  kd::DataLoader loader(ds, {.batch_size = 4, .pin_memory = true});
  BOOST_TEST(epoch(loader).first.size() == 6u);
}

BOOST_AUTO_TEST_CASE(random_sampler_num_samples_and_replacement_as_pytorch) {
  // Default: one permutation of the dataset an epoch, another the next epoch, the same for the same seed.
  const auto p0 = kd::RandomSampler{.seed = 4}.indices(10, 0);
  BOOST_TEST(std::set<index_t>(p0.begin(), p0.end()).size() == 10u);
  BOOST_TEST(p0 == kd::RandomSampler{.seed = 4}.indices(10, 0), boost::test_tools::per_element());
  BOOST_TEST(p0 != kd::RandomSampler{.seed = 4}.indices(10, 1));
  // Fewer than the dataset: distinct indices. More: whole permutations one after another, the last cut.
  const auto three = kd::RandomSampler{.seed = 4, .num_samples = 3}.indices(10, 0);
  BOOST_TEST(three.size() == 3u);
  BOOST_TEST(std::set<index_t>(three.begin(), three.end()).size() == 3u);
  const auto more = kd::RandomSampler{.seed = 4, .num_samples = 25}.indices(10, 0);
  BOOST_TEST(kd::RandomSampler{.num_samples = 25}.length(10) == 25);
  BOOST_REQUIRE(more.size() == 25u);
  for (std::size_t block : {0u, 10u})
    BOOST_TEST(std::set<index_t>(more.begin() + block, more.begin() + block + 10).size() == 10u);
  BOOST_TEST(std::set<index_t>(more.begin() + 20, more.end()).size() == 5u);
  // With replacement: num_samples draws (the dataset's size by default), each uniform over the dataset.
  BOOST_TEST(kd::RandomSampler{.replacement = true}.indices(7, 0).size() == 7u);
  const auto drawn = kd::RandomSampler{.seed = 9, .replacement = true, .num_samples = 4000}.indices(4, 3);
  BOOST_REQUIRE(drawn.size() == 4000u);
  std::array<int, 4> counts{};
  for (index_t i : drawn) {
    BOOST_REQUIRE((i >= 0 && i < 4));
    ++counts[static_cast<std::size_t>(i)];
  }
  for (int c : counts) BOOST_TEST((c > 850 && c < 1150), "count " << c << " of 4000 draws over 4");
  // A loader takes its length (torch's len(sampler)); a negative num_samples, or samples asked of an empty
  // dataset, are refused.
  const auto ds = images(8);
  kd::DataLoader five(ds, kd::RandomSampler{.seed = 1, .num_samples = 5}, {.batch_size = 2});
  BOOST_TEST(five.size() == 3);
  BOOST_TEST(epoch(five).first.size() == 5u);
  const auto negative = [](const kiln::ValueError& e) {
    return std::string(e.what()).find("num_samples is -1; it must be > 0") != std::string::npos;
  };
  BOOST_CHECK_EXCEPTION(kd::DataLoader(ds, kd::RandomSampler{.num_samples = -1}, {.batch_size = 2}), kiln::ValueError,
                        negative);
  // An empty dataset without num_samples: torch's RandomSampler refuses it (num_samples=0), with or
  // without replacement, and so does a shuffled loader, when it is made; a sequential one has no batches.
  const auto empty_dataset = [](const kiln::ValueError& e) {
    return std::string(e.what()).find("the dataset is empty") != std::string::npos;
  };
  for (bool replacement : {false, true})
    BOOST_CHECK_EXCEPTION(kd::RandomSampler{.replacement = replacement}.indices(0, 0), kiln::ValueError, empty_dataset);
  const auto none = images(0);
  BOOST_CHECK_EXCEPTION(kd::DataLoader(none, {.batch_size = 2, .shuffle = true}), kiln::ValueError, empty_dataset);
  kd::DataLoader sequential(none, {.batch_size = 2});
  BOOST_TEST(sequential.size() == 0);
  BOOST_TEST(epoch(sequential).first.empty());
  BOOST_CHECK_EXCEPTION(kd::DataLoader(none, kd::RandomSampler{}, {.batch_size = 2}), kiln::ValueError, empty_dataset);
  BOOST_CHECK_EXCEPTION(kd::RandomSampler{.num_samples = 3}.indices(0, 0), kiln::ValueError,
                        [](const kiln::ValueError& e) {
                          return std::string(e.what()).find("3 samples asked of an empty dataset") != std::string::npos;
                        });
}

BOOST_AUTO_TEST_CASE(distributed_sampler_pads_and_splits_like_pytorch) {
  // 10 samples over 3 ranks: 4 each; the permutation is padded with its first 2 entries.
  std::vector<std::vector<index_t>> parts;
  for (int r = 0; r < 3; ++r) parts.push_back(kd::DistributedSampler{.world_size = 3, .rank = r, .seed = 5}.indices(10, 2));
  const auto all = kd::detail::permutation(10, kd::detail::mix(5, 2));
  for (int r = 0; r < 3; ++r) {
    BOOST_TEST(parts[r].size() == 4u);
    for (std::size_t k = 0; k < 4; ++k) BOOST_TEST(parts[r][k] == all[(r + 3 * k) % 10]);
  }
  std::set<index_t> covered;
  for (const auto& p : parts) covered.insert(p.begin(), p.end());
  BOOST_TEST(covered.size() == 10u);
  const auto dropped = kd::DistributedSampler{.world_size = 3, .rank = 2, .shuffle = false, .drop_last = true}.indices(10, 0);
  BOOST_TEST(dropped == (std::vector<index_t>{2, 5, 8}), boost::test_tools::per_element());
  BOOST_CHECK_THROW(kd::DistributedSampler({.world_size = 2, .rank = 2}).indices(4, 0), kiln::ValueError);
  BOOST_CHECK_EXCEPTION(kd::DistributedSampler({.world_size = -2, .rank = 0}).indices(4, 0), kiln::ValueError,
                        [](const kiln::ValueError& e) {
                          return std::string(e.what()).find("world_size is -2; it must be >= 1") !=
                                 std::string::npos;
                        });
  // No silent "one rank of one": torch reads both from its process group, kiln needs them given, and a
  // loader says so when it gets the sampler.
  const auto required = [](const kiln::ValueError& e) {
    return std::string(e.what()).find("world_size and rank are required") != std::string::npos;
  };
  for (const auto& unset : {kd::DistributedSampler{}, kd::DistributedSampler{.world_size = 2},
                            kd::DistributedSampler{.rank = 0, .seed = 1}})
    BOOST_CHECK_EXCEPTION(unset.indices(4, 0), kiln::ValueError, required);
  const auto eight = images(8);
  BOOST_CHECK_EXCEPTION(kd::DataLoader(eight, kd::DistributedSampler{.seed = 1}, {.batch_size = 2}), kiln::ValueError,
                        required);
  kd::DataLoader switching(eight, {.batch_size = 2});
  BOOST_CHECK_EXCEPTION(switching.set_sampler(kd::DistributedSampler{.world_size = 2}), kiln::ValueError, required);
  BOOST_TEST(switching.size() == 4);  // the old sampler stays
  // Through a loader: each rank's batches hold its share.
  const auto ds = images(10);
  kd::DataLoader loader(ds, kd::DistributedSampler{.world_size = 3, .rank = 1, .shuffle = false}, {.batch_size = 3});
  BOOST_TEST(epoch(loader).first == (std::vector<std::int64_t>{1, 4, 7, 0}), boost::test_tools::per_element());
  // A loader made with the default sampler switches to a rank's share (what DistributedDataParallel's
  // trainers do): 4 of the 10 samples, 2 batches, from the next epoch on.
  kd::DataLoader plain(ds, {.batch_size = 3});
  BOOST_TEST(plain.size() == 4);
  plain.set_sampler(kd::DistributedSampler{.world_size = 3, .rank = 1, .shuffle = false});
  BOOST_TEST(plain.size() == 2);
  BOOST_TEST(epoch(plain).first == (std::vector<std::int64_t>{1, 4, 7, 0}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_samplers_length_is_the_size_of_its_order) {
  // len(sampler) without drawing an epoch: what DataLoader::size() divides by.
  for (index_t n = 0; n <= 13; ++n) {
    BOOST_TEST(kd::SequentialSampler{}.length(n) == n);
    if (n > 0) BOOST_TEST(kd::RandomSampler{.seed = 3}.length(n) == n);  // (0: refused, as torch's)
    for (int w = 1; w <= 5; ++w)
      for (int r = 0; r < w; ++r)
        for (const bool drop : {false, true}) {
          const kd::DistributedSampler s{.world_size = w, .rank = r, .seed = 2, .drop_last = drop};
          BOOST_TEST(s.length(n) == static_cast<index_t>(s.indices(n, 1).size()), "n " << n << " of " << w << " ranks, rank " << r);
        }
  }
  // A sampler of the caller's own, without length(): the loader counts one epoch's order.
  struct Evens {
    std::vector<index_t> indices(index_t n, std::uint64_t) const {
      std::vector<index_t> v;
      for (index_t i = 0; i < n; i += 2) v.push_back(i);
      return v;
    }
  };
  const auto ds = images(9);
  kd::DataLoader<std::decay_t<decltype(ds)>, kd::Identity, Evens> evens(ds, Evens{}, {.batch_size = 2});
  BOOST_TEST(evens.size() == 3);  // 0 2 4 6 8: batches of 2, the last short
  BOOST_TEST(epoch(evens).first == (std::vector<std::int64_t>{0, 2, 4, 6, 8}), boost::test_tools::per_element());
}

/// Normalize makes torchvision's float operations, (x - m) / s, so a CIFAR-10 image (bytes / 255) comes out
/// as torchvision's bit for bit; (x - m) * (1 / s) would differ in the last bit for 51 of the 256 values
/// of the red channel.
BOOST_AUTO_TEST_CASE(an_empty_compose_leaves_samples_as_they_are) {
  std::array<float, 3> x{1.0f, -2.0f, 3.5f};
  kd::SampleRng rng(0);
  kd::Compose<>{}.apply<Shape<3>>(std::span<float>(x), rng);  // torchvision's Compose([])
  BOOST_TEST(x == (std::array<float, 3>{1.0f, -2.0f, 3.5f}));
}

BOOST_AUTO_TEST_CASE(normalize_is_torchvisions_bit_for_bit) {
  using S = Shape<3, 16, 16>;
  const std::vector<float> mean = {0.4914f, 0.4822f, 0.4465f}, sd = {0.2470f, 0.2435f, 0.2616f};
  std::vector<float> x(3 * 256);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 256) / 255.0f;  // ToTensor
  auto y = x;
  kd::SampleRng rng(0);
  kd::Normalize{mean, sd}.apply<S>(std::span<float>(y), rng);
  int differ_from_reciprocal = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t c = i / 256;
    const float torchvision = (x[i] - mean[c]) / sd[c];  // tensor.sub_(mean).div_(std)
    BOOST_TEST(y[i] == torchvision);
    differ_from_reciprocal += (x[i] - mean[c]) * (1.0f / sd[c]) != torchvision;
  }
  BOOST_TEST(differ_from_reciprocal > 0);  // the check above tells the two apart
}

BOOST_AUTO_TEST_CASE(sample_rng_draws_normals_and_serves_the_standard_distributions) {
  kd::SampleRng rng(7);
  double sum = 0, sq = 0;
  constexpr int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double v = rng.normal(1.5, 2.0);
    sum += v, sq += v * v;
  }
  const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  BOOST_TEST(std::abs(mean - 1.5) < 0.02);  // 5 standard errors (2 / sqrt(n) = 0.0045)
  BOOST_TEST(std::abs(sd - 2.0) < 0.02);
  // A uniform random bit generator: <random>'s distributions take it, and one seed gives one stream.
  static_assert(std::uniform_random_bit_generator<kd::SampleRng>);
  kd::SampleRng a(3), b(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const float first = d(a);
  d.reset();
  BOOST_TEST(first == d(b));
  BOOST_TEST(std::isfinite(first));
}

BOOST_AUTO_TEST_CASE(gaussian_noise_adds_normal_noise_and_clips_as_torchvisions) {
  using S = Shape<4096>;
  std::vector<float> x(4096, 0.5f);
  kd::SampleRng rng(11);
  auto loose = x;
  kd::GaussianNoise{.mean = 0.1, .sigma = 0.05, .clip = false}.apply<S>(std::span<float>(loose), rng);
  double sum = 0, sq = 0;
  for (float v : loose) sum += v - 0.5, sq += (v - 0.5) * (v - 0.5);
  const double mean = sum / 4096, sd = std::sqrt(sq / 4096 - mean * mean);
  BOOST_TEST(std::abs(mean - 0.1) < 0.004);  // 5 standard errors (0.05 / 64)
  BOOST_TEST(std::abs(sd - 0.05) < 0.004);
  // The default: sigma 0.1, clipped to [0, 1] (torchvision.transforms.v2.GaussianNoise's clip=True).
  std::vector<float> edge(4096, 1.0f);
  kd::GaussianNoise{}.apply<S>(std::span<float>(edge), rng);
  int below_one = 0;
  for (float v : edge) {
    BOOST_TEST_REQUIRE((v >= 0.0f && v <= 1.0f));
    below_one += v < 1.0f;
  }
  BOOST_TEST(below_one > 1500);  // about half the draws are negative
  BOOST_TEST(below_one < 2600);
  BOOST_CHECK_THROW((kd::GaussianNoise{.sigma = -1.0}.apply<S>(std::span<float>(edge), rng)), kiln::ValueError);
}

BOOST_AUTO_TEST_CASE(transforms_normalize_flip_and_crop_like_torchvision) {
  using S = Shape<2, 3, 4>;
  std::vector<float> x(24);
  std::iota(x.begin(), x.end(), 0.0f);
  kd::SampleRng rng(1);
  auto n = x;
  kd::Normalize{{1.0f, 2.0f}, {2.0f, 4.0f}}.apply<S>(std::span<float>(n), rng);
  BOOST_TEST(n[0] == -0.5f);           // (0 - 1) / 2
  BOOST_TEST(n[12] == (12.0f - 2.0f) / 4.0f);
  auto f = x;
  kd::RandomHorizontalFlip{.p = 1.0}.apply<S>(std::span<float>(f), rng);
  BOOST_TEST(f[0] == 3.0f);
  BOOST_TEST(f[4 * 5 + 1] == 22.0f);  // row 5, column 1 <- column 2
  // p NaN never flips, as torchvision's `torch.rand(1) < p`; p 0 never, p 1 always (above).
  for (const double p : {std::numeric_limits<double>::quiet_NaN(), 0.0}) {
    auto kept = x;
    for (int k = 0; k < 50; ++k) kd::RandomHorizontalFlip{.p = p}.apply<S>(std::span<float>(kept), rng);
    BOOST_TEST(kept == x, boost::test_tools::per_element());
  }
  // SampleRng::below(n) draws from [0, n): n <= 0 is refused (was a division by zero for 0).
  BOOST_CHECK_THROW((void)rng.below(0), kiln::ValueError);
  BOOST_CHECK_THROW((void)rng.below(-3), kiln::ValueError);
  for (int k = 0; k < 100; ++k) BOOST_TEST(rng.below(1) == 0);
  BOOST_CHECK_THROW((kd::Normalize{{1, 2, 3}, {1, 1, 1}}.apply<S>(std::span<float>(n), rng)), kiln::ValueError);
  // A std of 0 would make the batch inf or NaN: torchvision's normalize raises, as ScaleNormalize does.
  BOOST_CHECK_EXCEPTION((kd::Normalize{{1, 2}, {2, 0}}.apply<S>(std::span<float>(n), rng)), kiln::ValueError,
                        [](const kiln::ValueError& e) { return std::string(e.what()).find("std[1] is 0") != std::string::npos; });
  BOOST_CHECK_THROW((kd::Normalize{{1}, {0}}.apply<S>(std::span<float>(n), rng)), kiln::ValueError);
  // Mean and std each broadcast on their own, as torchvision's (one std for both channels here).
  auto b = x;
  kd::Normalize{{1.0f, 2.0f}, {4.0f}}.apply<S>(std::span<float>(b), rng);
  BOOST_TEST(b[1] == 0.0f);
  BOOST_TEST(b[13] == (13.0f - 2.0f) / 4.0f);
  // RandomCrop(padding 1): the output is the input shifted by some (dy, dx) in [-1, 1]^2, zeros outside,
  // and over many draws every shift appears.
  std::set<std::pair<int, int>> shifts;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    auto c = x;
    kd::SampleRng r(seed);
    kd::RandomCrop{.padding = 1}.apply<S>(std::span<float>(c), r);
    int found = 0;
    for (int dy = -1; dy <= 1; ++dy)
      for (int dx = -1; dx <= 1; ++dx) {
        bool same = true;
        for (int ch = 0; ch < 2 && same; ++ch)
          for (int h = 0; h < 3 && same; ++h)
            for (int w = 0; w < 4 && same; ++w) {
              const int sh = h + dy, sw = w + dx;
              const float want = (sh >= 0 && sh < 3 && sw >= 0 && sw < 4) ? x[(ch * 3 + sh) * 4 + sw] : 0.0f;
              same = c[(ch * 3 + h) * 4 + w] == want;
            }
        if (same) shifts.insert({dy, dx}), ++found;
      }
    BOOST_TEST(found == 1);
  }
  BOOST_TEST(shifts.size() == 9u);
  // Called by hand on a span that is not one sample: refused before anything is read or written.
  std::vector<float> short_span(x.begin(), x.end() - 1);
  const auto one_sample = [](const kiln::ValueError& e) {
    return std::string(e.what()).find("the span holds 23 values; expected one sample of 24") != std::string::npos;
  };
  BOOST_CHECK_EXCEPTION(kd::RandomCrop{.padding = 1}.apply<S>(std::span<float>(short_span), rng), kiln::ValueError,
                        one_sample);
  BOOST_CHECK_EXCEPTION(kd::RandomHorizontalFlip{.p = 1.0}.apply<S>(std::span<float>(short_span), rng),
                        kiln::ValueError, one_sample);
  BOOST_CHECK_EXCEPTION((kd::Normalize{{1.0f}, {2.0f}}.apply<S>(std::span<float>(short_span), rng)),
                        kiln::ValueError, one_sample);
  BOOST_TEST(short_span == std::vector<float>(x.begin(), x.end() - 1), boost::test_tools::per_element());
}

// RandomCrop's padding modes against numpy.pad(np.arange(12).reshape(3, 4), 2, mode) (the padded
// images torchvision crops from; constant with fill 7): every output is a 3 x 4 window of them, every
// window appears, and the defaults (padding 0) leave the image as it is.
BOOST_AUTO_TEST_CASE(random_crop_pads_like_torchvision) {
  using S = Shape<1, 3, 4>;
  std::vector<float> x(12);
  std::iota(x.begin(), x.end(), 0.0f);
  const std::pair<kd::PaddingMode, std::vector<float>> padded[] = {
      {kd::PaddingMode::constant, {7, 7, 7, 7, 7, 7, 7, 7,  7, 7, 7, 7, 7, 7, 7, 7,  7, 7, 0, 1, 2,  3,  7, 7,
                                   7, 7, 4, 5, 6, 7, 7, 7,  7, 7, 8, 9, 10, 11, 7, 7,  7, 7, 7, 7, 7,  7,  7, 7,
                                   7, 7, 7, 7, 7, 7, 7, 7}},
      {kd::PaddingMode::edge, {0, 0, 0, 1, 2,  3,  3,  3,  0, 0, 0, 1, 2,  3,  3,  3,  0, 0, 0, 1, 2,  3,  3,  3,
                               4, 4, 4, 5, 6,  7,  7,  7,  8, 8, 8, 9, 10, 11, 11, 11, 8, 8, 8, 9, 10, 11, 11, 11,
                               8, 8, 8, 9, 10, 11, 11, 11}},
      {kd::PaddingMode::reflect, {10, 9, 8, 9, 10, 11, 10, 9, 6,  5, 4, 5, 6, 7,  6, 5, 2, 1, 0, 1, 2,  3,  2,  1,
                                  6,  5, 4, 5, 6,  7,  6,  5, 10, 9, 8, 9, 10, 11, 10, 9, 6, 5, 4, 5, 6, 7, 6, 5,
                                  2,  1, 0, 1, 2,  3,  2,  1}},
      {kd::PaddingMode::symmetric, {5, 4, 4, 5, 6,  7,  7,  6,  1, 0, 0, 1, 2,  3,  3,  2,  1, 0, 0, 1, 2, 3, 3, 2,
                                    5, 4, 4, 5, 6,  7,  7,  6,  9, 8, 8, 9, 10, 11, 11, 10, 9, 8, 8, 9, 10, 11, 11, 10,
                                    5, 4, 4, 5, 6,  7,  7,  6}},
  };
  for (const auto& [mode, pad] : padded) {
    BOOST_TEST_CONTEXT("padding mode " << static_cast<int>(mode)) {
      const kd::RandomCrop crop{.padding = 2, .fill = 7.0, .padding_mode = mode};
      std::set<std::pair<int, int>> windows;
      for (std::uint64_t seed = 0; seed < 400; ++seed) {
        auto c = x;
        kd::SampleRng r(seed);
        crop.apply<S>(std::span<float>(c), r);
        int found = 0;
        for (int top = 0; top <= 4; ++top)
          for (int left = 0; left <= 4; ++left) {
            bool same = true;
            for (int h = 0; h < 3 && same; ++h)
              for (int w = 0; w < 4 && same; ++w) same = c[h * 4 + w] == pad[(top + h) * 8 + left + w];
            if (same) windows.insert({top, left}), ++found;
          }
        BOOST_TEST(found >= 1);  // a window of the padded image (reflections may repeat one)
      }
      BOOST_TEST(windows.size() == 25u);  // every one of the 5 x 5 windows over the draws
    }
  }
  // Bytes pad with a byte fill; a fill the bytes cannot hold, a negative padding, or a reflection wider
  // than the image throws.
  std::vector<std::uint8_t> b(12, 1);
  kd::SampleRng r(3);
  bool saw_fill = false;
  for (std::uint64_t seed = 0; seed < 50 && !saw_fill; ++seed) {
    auto c = b;
    kd::SampleRng rs(seed);
    kd::RandomCrop{.padding = 1, .fill = 200.0}.apply<S>(std::span<std::uint8_t>(c), rs);
    saw_fill = std::find(c.begin(), c.end(), std::uint8_t{200}) != c.end();
  }
  BOOST_TEST(saw_fill);
  BOOST_CHECK_THROW((kd::RandomCrop{.padding = 1, .fill = 256.0}.apply<S>(std::span<std::uint8_t>(b), r)), kiln::ValueError);
  BOOST_CHECK_THROW((kd::RandomCrop{.padding = 1, .fill = 0.5}.apply<S>(std::span<std::uint8_t>(b), r)), kiln::ValueError);
  BOOST_CHECK_THROW((kd::RandomCrop{.padding = -1}.apply<S>(std::span<float>(x), r)), kiln::ValueError);
  BOOST_CHECK_THROW((kd::RandomCrop{.padding = kd::RandomCrop::max_padding + 1}.apply<S>(std::span<float>(x), r)),
                    kiln::ValueError);  // (a padding near 2^62 overflowed 2 padding + 1)
  BOOST_CHECK_NO_THROW((kd::RandomCrop{.padding = kd::RandomCrop::max_padding}.apply<S>(std::span<float>(x), r)));
  BOOST_CHECK_THROW((kd::RandomCrop{.padding = 3, .padding_mode = kd::PaddingMode::reflect}.apply<S>(std::span<float>(x), r)),
                    kiln::ValueError);
  BOOST_CHECK_THROW((kd::RandomCrop{.padding = 4, .padding_mode = kd::PaddingMode::symmetric}.apply<S>(std::span<float>(x), r)),
                    kiln::ValueError);
  BOOST_CHECK_NO_THROW((kd::RandomCrop{.padding = 3, .padding_mode = kd::PaddingMode::symmetric}.apply<S>(std::span<float>(x), r)));
  // The defaults: torchvision's RandomCrop(size) of an image of that size, the image itself.
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    auto c = x;
    kd::SampleRng rs(seed);
    kd::RandomCrop{}.apply<S>(std::span<float>(c), rs);
    BOOST_TEST(c == x, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
