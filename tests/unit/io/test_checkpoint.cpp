// Checkpoints: PyTorch weights load into kiln and reproduce PyTorch's logits; save/load round trips
// atomically; every malformed or mismatched file (another model's, a deeper one's) is rejected with a
// message naming what is wrong.
#include <sys/stat.h>

#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <kiln/io/optimizer_state.hpp>
#include <kiln/io/safetensors.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "support/parity.hpp"
#include "support/peak_memory.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"

namespace {
namespace fs = std::filesystem;
using kiln::dyn;
using kiln::Shape;
using namespace kiln::nn;
using LeNet = Sequential<Conv2d<3, 6, 5>, ReLU, MaxPool2d<2>, Conv2d<6, 16, 5>, ReLU, MaxPool2d<2>, Flatten,
                         Linear<400, 120>, ReLU, Linear<120, 84>, ReLU, Linear<84, 10>>;
using Mlp = Sequential<Linear<13, 16>, ReLU, Linear<16, 32>, ReLU, Linear<32, 1>>;

fs::path fixtures() { return fs::path(kiln::test::parity::fixture_path("lenet_output.json")).parent_path(); }

/// A fresh scratch folder per test.
fs::path scratch(const std::string& name) {
  const auto d = fs::temp_directory_path() / ("kiln_test_checkpoint_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

template <class Check>
bool rejects(const fs::path& file, Check&& expected_text) {
  kiln::nn::Model<Mlp, Shape<dyn, 13>> m(0);
  try {
    kiln::load_checkpoint(file, m);
  } catch (const kiln::CheckpointError& e) {
    const std::string msg = e.what();
    BOOST_TEST_MESSAGE(msg);
    return msg.find(file.string()) != std::string::npos && expected_text(msg);
  }
  return false;
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// The files in `dir` whose names hold ".tmp" (a writer's temporary files that were left behind).
int temporary_files(const fs::path& dir) {
  int n = 0;
  for (const auto& f : fs::directory_iterator(dir)) n += contains(f.path().filename().string(), ".tmp") ? 1 : 0;
  return n;
}

using kiln::test::peak_mib;
using kiln::test::reset_peak;
}  // namespace

BOOST_AUTO_TEST_SUITE(io)

BOOST_AUTO_TEST_CASE_TEMPLATE(pytorch_lenet_weights_reproduce_pytorchs_logits, D, kiln::test::devices) {
  kiln::nn::Model<LeNet, Shape<dyn, 3, 32, 32>, kiln::Policy<kiln::Fp32, D>> model(123);
  const auto rest = kiln::load_checkpoint(fixtures() / "lenet_state.safetensors", model);
  BOOST_TEST(rest.empty());
  std::ifstream f(fixtures() / "lenet_output.json");
  const auto ref = nlohmann::json::parse(f);
  const auto x = ref["input"].get<std::vector<float>>();
  const auto expected = ref["output"].get<std::vector<float>>();
  model.eval();
  kiln::nn::NoGrad guard(model);
  const auto y = model.forward(kiln::test::make_tensor<D>(x, kiln::Extents<Shape<dyn, 3, 32, 32>>(2))).to_vector();
  BOOST_REQUIRE_EQUAL(y.size(), expected.size());
  // Relative to the largest logit (a logit near 0 is the difference of larger sums: its own relative
  // error says nothing about the arithmetic).
  double scale = 0;
  for (float e : expected) scale = std::max(scale, std::abs(static_cast<double>(e)));
  for (std::size_t i = 0; i < y.size(); ++i) BOOST_TEST(std::abs(y[i] - expected[i]) <= 1e-5 * scale);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(save_then_load_round_trips_atomically, D, kiln::test::devices) {
  const auto dir = scratch("roundtrip");
  const auto file = dir / "mlp.safetensors";
  kiln::nn::Model<Mlp, Shape<dyn, 13>, kiln::Policy<kiln::Fp32, D>> a(1), b(2);
  const std::vector<float> step{7.0f};
  kiln::save_checkpoint(file, a, {{"optimizer.step", kiln::make_entry<float>(step, {1})}}, {{"epoch", "3"}});
  BOOST_TEST(fs::exists(file));
  BOOST_TEST(temporary_files(dir) == 0);
  std::map<std::string, std::string> meta;
  const auto rest = kiln::load_checkpoint(file, b, &meta);
  BOOST_TEST(b.parameters().to_vector() == a.parameters().to_vector());
  BOOST_TEST(meta["epoch"] == "3");
  BOOST_REQUIRE_EQUAL(rest.count("optimizer.step"), 1u);
  BOOST_TEST(rest.at("optimizer.step").dtype == "F32");
  // Overwriting keeps a complete file at every moment: the new one replaces the old by rename.
  kiln::save_checkpoint(file, b);
  BOOST_TEST(kiln::read_safetensors(file).size() == 6u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(a_resume_draws_the_dropout_masks_the_run_would_have, D, kiln::test::devices) {
  // 5 steps, a checkpoint, 4 more in a model built anew (the same seed) and loaded: the weights equal
  // 9 steps of one run, bit for bit (each Dropout's mask counter was its own and restarted at 0: the
  // resumed run drew the first steps' masks again). A checkpoint without the count (torch's) keeps the
  // model's.
  using Net =
      Sequential<Linear<13, 16>, ReLU, Dropout<0.5f>, Linear<16, 32>, ReLU, Dropout<0.25f>, Linear<32, 1>>;
  using M = kiln::nn::Model<Net, Shape<dyn, 13>, kiln::Policy<kiln::Fp32, D>>;
  const auto dir = scratch("dropout_resume");
  const auto file = dir / "run.safetensors";
  kiln::Tensor<float, Shape<dyn, 13>, D> x(8);
  kiln::Tensor<float, Shape<dyn, 1>, D> y(8);
  {
    std::vector<float> xs(8 * 13), ys(8);
    for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 37) % 11) / 11.0f - 0.5f;
    for (std::size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<float>(i % 3);
    x.copy_from(std::span<const float>(xs));
    y.copy_from(std::span<const float>(ys));
  }
  kiln::nn::MSELoss mse;
  const auto steps = [&](M& model, kiln::optim::SGD<float, D>& opt, int n) {
    for (int k = 0; k < n; ++k) {
      opt.zero_grad();
      const auto out = model(x);
      model.backward(mse.backward(out, y));
      opt.step();
    }
  };
  M whole(3);
  kiln::optim::SGD whole_opt(whole, {.lr = 0.05});
  steps(whole, whole_opt, 9);
  BOOST_TEST(whole.training_forwards() == 9u);

  M first(3);
  kiln::optim::SGD first_opt(first, {.lr = 0.05});
  steps(first, first_opt, 5);
  kiln::save_checkpoint(file, first);
  M resumed(3);
  kiln::optim::SGD resumed_opt(resumed, {.lr = 0.05});
  std::map<std::string, std::string> meta;
  kiln::load_checkpoint(file, resumed, &meta);
  BOOST_TEST(meta.at("kiln.training_forwards") == "5");
  BOOST_TEST(resumed.training_forwards() == 5u);
  steps(resumed, resumed_opt, 4);
  BOOST_TEST(resumed.parameters().to_vector() == whole.parameters().to_vector(),
             boost::test_tools::per_element());

  // Evaluation forwards are not counted; a file without the count (torch's) leaves the model's.
  resumed.eval();
  (void)resumed(x);
  BOOST_TEST(resumed.training_forwards() == 9u);
  auto entries = kiln::read_safetensors(file);
  kiln::write_safetensors(dir / "torch.safetensors", entries, {{"format", "pt"}});
  kiln::load_checkpoint(dir / "torch.safetensors", resumed);
  BOOST_TEST(resumed.training_forwards() == 9u);
  // A count that is not one is the file's error, before anything is written.
  kiln::write_safetensors(dir / "bad.safetensors", entries, {{"kiln.training_forwards", "-1"}});
  M other(4);
  const auto before = other.parameters().to_vector();
  BOOST_CHECK_EXCEPTION(kiln::load_checkpoint(dir / "bad.safetensors", other), kiln::CheckpointError,
                        [](const kiln::CheckpointError& e) {
                          return contains(e.what(), "a count of forwards");
                        });
  BOOST_TEST(other.parameters().to_vector() == before, boost::test_tools::per_element());
  BOOST_TEST(other.training_forwards() == 0u);
}

BOOST_AUTO_TEST_CASE(load_state_dict_loads_what_it_has_as_torchs_with_strict_false) {
  // torch's model.load_state_dict(sd, strict): a pretrained MLP's body under a new head (3 outputs):
  // strict refuses the head's missing keys and an unexpected one, writing nothing; strict = false loads
  // the body, keeps the head, and returns the names as torch's _IncompatibleKeys. A wrong shape is an
  // error either way (torch's size mismatch). A BatchNorm's num_batches_tracked reads as 0 when absent.
  using Head3 = Sequential<Linear<13, 16>, ReLU, Linear<16, 32>, ReLU, Linear<32, 3>>;
  const auto dir = scratch("load_state_dict");
  kiln::nn::Model<Mlp, Shape<dyn, 13>> pretrained(1);
  kiln::save_checkpoint(dir / "mlp.safetensors", pretrained);
  auto sd = kiln::read_safetensors(dir / "mlp.safetensors");
  kiln::nn::Model<Head3, Shape<dyn, 13>> model(2);
  const auto fresh = model.parameters().to_vector();
  BOOST_CHECK_EXCEPTION(
      kiln::load_state_dict(model, sd, false), kiln::ValueError, [](const kiln::ValueError& e) {
        return contains(e.what(), "parameter '4.weight' has shape [1, 32], the model expects [3, 32]");
      });
  sd.erase("4.weight");
  sd.erase("4.bias");
  sd["extra.step"] = kiln::make_entry<float>(std::vector<float>{1.0f}, {1});
  BOOST_CHECK_EXCEPTION(kiln::load_state_dict(model, sd), kiln::ValueError, [](const kiln::ValueError& e) {
    return contains(e.what(), "missing keys '4.weight', '4.bias'; unexpected keys 'extra.step'") &&
           contains(e.what(), "strict = false loads");
  });
  BOOST_TEST(model.parameters().to_vector() == fresh, boost::test_tools::per_element());
  const kiln::IncompatibleKeys keys = kiln::load_state_dict(model, sd, false);
  BOOST_TEST((keys.missing_keys == std::vector<std::string>{"4.weight", "4.bias"}));
  BOOST_TEST((keys.unexpected_keys == std::vector<std::string>{"extra.step"}));
  const auto loaded = model.parameters().to_vector();
  const auto body = pretrained.parameters().to_vector();
  const auto head = static_cast<std::size_t>(model.layer_offset(4));
  BOOST_TEST(std::equal(loaded.begin(), loaded.begin() + static_cast<std::ptrdiff_t>(head), body.begin()));
  BOOST_TEST(std::equal(loaded.begin() + static_cast<std::ptrdiff_t>(head), loaded.end(),
                        fresh.begin() + static_cast<std::ptrdiff_t>(head)));
  // The whole state dict, strict: nothing missing or unexpected.
  kiln::nn::Model<Mlp, Shape<dyn, 13>> same(3);
  const auto all = kiln::load_state_dict(same, kiln::read_safetensors(dir / "mlp.safetensors"));
  BOOST_TEST(all.missing_keys.empty());
  BOOST_TEST(all.unexpected_keys.empty());
  BOOST_TEST(same.parameters().to_vector() == body, boost::test_tools::per_element());
  // BatchNorm: the running statistics are loaded; num_batches_tracked absent reads as 0, as torch's.
  using Bn = Sequential<Linear<4, 3>, BatchNorm1d<3>>;
  kiln::nn::Model<Bn, Shape<dyn, 4>> with_stats(4);
  with_stats.buffers().fill(2.0f);
  kiln::save_checkpoint(dir / "bn.safetensors", with_stats);
  auto bn = kiln::read_safetensors(dir / "bn.safetensors");
  BOOST_REQUIRE(bn.erase("1.num_batches_tracked") == 1u);
  kiln::nn::Model<Bn, Shape<dyn, 4>> into(5);
  const auto bn_keys = kiln::load_state_dict(into, bn);
  BOOST_TEST(bn_keys.missing_keys.empty());
  const auto stats = into.buffers().to_vector();
  BOOST_TEST(std::count(stats.begin(), stats.end(), 2.0f) == static_cast<std::ptrdiff_t>(stats.size() - 1));
  BOOST_TEST(stats.back() == 0.0f);
}

// A resume (model, Adam, GradScaler) that checks every part in load_checkpoint's `check` before it writes
// any: a checkpoint whose last-checked part is broken leaves model, optimizer, scaler and the caller's
// metadata as they were; a whole one restores them all.
BOOST_AUTO_TEST_CASE(a_resume_checked_before_it_writes_changes_nothing_on_a_bad_part) {
  const auto dir = scratch("resume");
  const auto file = dir / "state.safetensors";
  kiln::nn::Model<Mlp, Shape<dyn, 13>> saved(1), resumed(2);
  kiln::optim::Adam<float, kiln::Cpu> a(saved), b(resumed);
  a.exp_avg().fill(0.25f);
  a.set_step_count(7);
  kiln::optim::GradScaler<kiln::Cpu> saved_scaler({.init_scale = 8.0}), scaler;
  const kiln::OptimizerState state = kiln::optimizer_state(a);
  auto meta = saved_scaler.state("grad_scaler.");
  meta.insert(state.metadata.begin(), state.metadata.end());
  std::map<std::string, std::string> got{{"untouched", "1"}};
  const auto resume = [&](const std::map<std::string, std::string>& written) {
    kiln::save_checkpoint(file, saved, state.entries, written);
    const auto rest = kiln::load_checkpoint(file, resumed, &got, [&](const auto& entries, const auto& m) {
      kiln::check_optimizer_state(b, entries, m, file.string());
      scaler.check_state(m, "grad_scaler.");
    });
    kiln::load_optimizer_state(b, rest, got, file.string());
    scaler.load_state(got, "grad_scaler.");
  };
  const auto fresh = resumed.parameters().to_vector();
  const auto unchanged = [&] {
    return resumed.parameters().to_vector() == fresh && b.step_count() == 0 && b.exp_avg().to_vector()[0] == 0.0f &&
           scaler.scale() == 65536.0 && got.size() == 1;
  };
  auto bad = meta;
  bad["grad_scaler.scale"] = "-1";
  // (check's ValueError comes back as a CheckpointError naming the file: it was the scaler's check of it)
  BOOST_CHECK_EXCEPTION(resume(bad), kiln::CheckpointError, [&](const kiln::CheckpointError& e) {
    return contains(e.what(), "'grad_scaler.scale' is '-1'") && contains(e.what(), file.string());
  });
  BOOST_TEST(unchanged());
  bad = meta;
  bad["optimizer.lr"] = std::string("0.1\0\x1b[31m", 9);  // the file's text is shown escaped
  BOOST_CHECK_EXCEPTION(resume(bad), kiln::CheckpointError, [](const kiln::CheckpointError& e) {
    return contains(e.what(), "'optimizer.lr' is '0.1\\u0000\\u001b[31m'; expected a finite number");
  });
  BOOST_TEST(unchanged());
  bad = meta;
  bad["optimizer.type"] = "SGD";
  BOOST_CHECK_EXCEPTION(resume(bad), kiln::CheckpointError, [](const kiln::CheckpointError& e) {
    return contains(e.what(), "the optimizer state is SGD's; expected Adam's");
  });
  BOOST_TEST(unchanged());
  bad = meta;
  bad["optimizer.step"] = "x";
  BOOST_CHECK_THROW(resume(bad), kiln::CheckpointError);
  BOOST_TEST(unchanged());

  resume(meta);
  BOOST_TEST(resumed.parameters().to_vector() == saved.parameters().to_vector());
  BOOST_TEST(b.step_count() == 7);
  BOOST_TEST(b.exp_avg().to_vector() == a.exp_avg().to_vector());
  BOOST_TEST(scaler.scale() == 8.0);
  BOOST_TEST(got.at("optimizer.type") == "Adam");
}

BOOST_AUTO_TEST_CASE(a_model_of_another_shape_is_rejected_with_both_shapes) {
  const auto dir = scratch("mismatch");
  using Other = Sequential<Linear<13, 8>, ReLU, Linear<8, 32>, ReLU, Linear<32, 1>>;
  kiln::nn::Model<Other, Shape<dyn, 13>> other(0);
  kiln::save_checkpoint(dir / "other.safetensors", other);
  BOOST_TEST(rejects(dir / "other.safetensors", [](const std::string& m) {
    return contains(m, "'0.weight'") && contains(m, "[8, 13]") && contains(m, "[16, 13]");
  }));
  // Every difference in one error, as torch's load_state_dict lists them: a wider and deeper model's
  // checkpoint differs in four shapes and has two parameters more; the model is left as it was.
  using Wider = Sequential<Linear<13, 8>, ReLU, Linear<8, 8>, ReLU, Linear<8, 1>, ReLU, Linear<1, 2>>;
  kiln::nn::Model<Wider, Shape<dyn, 13>> wider(0);
  kiln::save_checkpoint(dir / "wider.safetensors", wider);
  kiln::nn::Model<Mlp, Shape<dyn, 13>> mlp(0);
  const auto before = mlp.parameters().to_vector();
  std::string message;
  try {
    kiln::load_checkpoint(dir / "wider.safetensors", mlp);
  } catch (const kiln::CheckpointError& e) {
    message = e.what();
  }
  BOOST_TEST(message == "kiln: " + (dir / "wider.safetensors").string() +
                            ": parameter '0.weight' has shape [8, 13], the model expects [16, 13]; parameter '0.bias' "
                            "has shape [8], the model expects [16]; parameter '2.weight' has shape [8, 8], the model "
                            "expects [32, 16]; parameter '2.bias' has shape [8], the model expects [32]; parameter "
                            "'4.weight' has shape [1, 8], the model expects [1, 32]; unexpected parameters '6.bias' "
                            "[2], '6.weight' [2, 1]: the model has none of that name; the checkpoint is of another "
                            "model",
             message);
  BOOST_TEST(mlp.parameters().to_vector() == before, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_checkpoint_of_other_names_is_rejected_with_the_renaming_that_fixes_it) {
  // torch's `class Net(nn.Module)` with self.fc1, self.fc2, self.fc3 saves fc1.weight, ...: the MLP's
  // tensors under names kiln does not use (it names layers by position, as nn.Sequential does). The
  // error says to rename the keys; renamed, the same tensors load.
  const auto dir = scratch("attributes");
  kiln::nn::Model<Mlp, Shape<dyn, 13>> mlp(3);
  kiln::save_checkpoint(dir / "positions.safetensors", mlp);
  const std::map<std::string, std::string> torch_names{{"0.weight", "fc1.weight"}, {"0.bias", "fc1.bias"},
                                                       {"2.weight", "fc2.weight"}, {"2.bias", "fc2.bias"},
                                                       {"4.weight", "fc3.weight"}, {"4.bias", "fc3.bias"}};
  std::map<std::string, kiln::SafetensorsEntry> named;
  for (auto& [name, e] : kiln::read_safetensors(dir / "positions.safetensors")) named[torch_names.at(name)] = e;
  kiln::write_safetensors(dir / "attributes.safetensors", named);
  BOOST_TEST(rejects(dir / "attributes.safetensors", [](const std::string& m) {
    return contains(m, "missing parameter '0.weight' (shape [16, 13])") &&
           contains(m, "unexpected parameters 'fc1.bias' [16], 'fc1.weight' [16, 13]") &&
           contains(m, "or of one whose layers are named attributes (self.fc1: fc1.weight, fc1.bias), where this "
                       "model's names are '0.weight', '0.bias', ... (model.named_parameters(), in order; a "
                       "Sequential numbers its layers as nn.Sequential does); rename the keys");
  }));
  // A DataParallel / DDP wrapper's state_dict: the same names after 'module.'.
  std::map<std::string, kiln::SafetensorsEntry> wrapped;
  for (auto& [name, e] : kiln::read_safetensors(dir / "positions.safetensors")) wrapped["module." + name] = e;
  kiln::write_safetensors(dir / "wrapped.safetensors", wrapped);
  BOOST_TEST(rejects(dir / "wrapped.safetensors", [](const std::string& m) {
    return contains(m, "saved through a DataParallel or DistributedDataParallel wrapper (its names start with "
                       "'module.'): save the wrapped module's state_dict, or strip the prefix") &&
           !contains(m, "rename the keys");
  }));
  std::map<std::string, kiln::SafetensorsEntry> renamed;
  for (const auto& [kiln_name, torch_name] : torch_names) renamed[kiln_name] = named.at(torch_name);
  kiln::write_safetensors(dir / "renamed.safetensors", renamed);
  kiln::nn::Model<Mlp, Shape<dyn, 13>> loaded(0);
  kiln::load_checkpoint(dir / "renamed.safetensors", loaded);
  BOOST_TEST(loaded.parameters().to_vector() == mlp.parameters().to_vector(), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_deeper_models_checkpoint_is_rejected_naming_the_extra_parameters) {
  // Every parameter of the MLP is in the file with its shape; 6.weight and 6.bias are not the MLP's
  // (torch's strict load_state_dict: "Unexpected key(s)"; named by position, so no renaming hint).
  // Entries not named like parameters stay the caller's.
  const auto dir = scratch("deeper");
  using Deeper = Sequential<Linear<13, 16>, ReLU, Linear<16, 32>, ReLU, Linear<32, 1>, ReLU, Linear<1, 2>>;
  kiln::nn::Model<Deeper, Shape<dyn, 13>> deeper(0);
  const std::vector<float> one{1.0f};
  kiln::save_checkpoint(dir / "deeper.safetensors", deeper, {{"my.note", kiln::make_entry<float>(one, {1})}});
  BOOST_TEST(rejects(dir / "deeper.safetensors", [](const std::string& m) {
    return contains(m, "unexpected parameters '6.bias' [2], '6.weight' [2, 1]") && contains(m, "another model") &&
           !contains(m, "rename the keys");
  }));
  kiln::nn::Model<Mlp, Shape<dyn, 13>> mlp(0);
  kiln::save_checkpoint(dir / "mlp.safetensors", mlp, {{"my.note", kiln::make_entry<float>(one, {1})}});
  BOOST_TEST(kiln::load_checkpoint(dir / "mlp.safetensors", mlp).count("my.note") == 1u);
  // An extra named like a parameter (an EMA copy of a weight) is listed by save_checkpoint as the
  // caller's, so it loads and comes back; the same entry in a file of another writer is another model's.
  const std::vector<float> ema(16, 0.5f);
  kiln::save_checkpoint(dir / "ema.safetensors", mlp, {{"ema.2.weight", kiln::make_entry<float>(ema, {1, 16})}},
                        {{"epoch", "4"}});
  std::map<std::string, std::string> meta;
  const auto rest = kiln::load_checkpoint(dir / "ema.safetensors", mlp, &meta);
  BOOST_TEST(rest.count("ema.2.weight") == 1u);
  BOOST_TEST(meta.at("epoch") == "4");
  BOOST_TEST(meta.at("kiln.extra_entries") == R"(["ema.2.weight"])");
  auto entries = kiln::read_safetensors(dir / "ema.safetensors");
  kiln::write_safetensors(dir / "ema_unlisted.safetensors", entries, {{"epoch", "4"}});
  BOOST_TEST(rejects(dir / "ema_unlisted.safetensors",
                     [](const std::string& m) { return contains(m, "unexpected parameters 'ema.2.weight' [1, 16]"); }));
  kiln::write_safetensors(dir / "ema_bad_list.safetensors", entries, {{"kiln.extra_entries", "ema.2.weight"}});
  BOOST_TEST(rejects(dir / "ema_bad_list.safetensors", [](const std::string& m) {
    return contains(m, "metadata \"kiln.extra_entries\" must be a JSON array of entry names, got ema.2.weight");
  }));
  // A nested list is refused before it is parsed (its depth would cost memory).
  kiln::write_safetensors(dir / "ema_deep_list.safetensors", entries,
                          {{"kiln.extra_entries", std::string(1'000'000, '[')}});
  BOOST_TEST(rejects(dir / "ema_deep_list.safetensors", [](const std::string& m) {
    return contains(m, "must be a JSON array of entry names, got [[[[");
  }));
  // The key is save_checkpoint's own; an extra whose name is not UTF-8 cannot be listed.
  BOOST_CHECK_EXCEPTION(kiln::save_checkpoint(dir / "reserved.safetensors", mlp, {}, {{"kiln.extra_entries", "[]"}}),
                        kiln::CheckpointError, [](const kiln::CheckpointError& e) {
                          return contains(e.what(), "\"kiln.extra_entries\" is save_checkpoint's own");
                        });
  BOOST_CHECK_EXCEPTION(
      kiln::save_checkpoint(dir / "latin1.safetensors", mlp, {{"caf\xe9", kiln::make_entry<float>(one, {1})}}),
      kiln::CheckpointError, [](const kiln::CheckpointError& e) { return contains(e.what(), "must be UTF-8"); });
  BOOST_TEST(!fs::exists(dir / "reserved.safetensors"));
  BOOST_TEST(!fs::exists(dir / "latin1.safetensors"));
}

BOOST_AUTO_TEST_CASE(missing_truncated_and_corrupt_files_are_rejected_with_the_position) {
  const auto dir = scratch("bad");
  kiln::nn::Model<Mlp, Shape<dyn, 13>> m(0);
  const auto good = dir / "good.safetensors";
  kiln::save_checkpoint(good, m);
  BOOST_TEST(rejects(dir / "absent.safetensors", [](const std::string& s) { return contains(s, "cannot open"); }));
  // Truncated: the last tensor's bytes are cut.
  const auto size = fs::file_size(good);
  fs::copy_file(good, dir / "short.safetensors");
  fs::resize_file(dir / "short.safetensors", size - 10);
  BOOST_TEST(rejects(dir / "short.safetensors", [](const std::string& s) { return contains(s, "data_offsets"); }));
  // Too small for the header size.
  {
    std::ofstream(dir / "tiny.safetensors") << "abc";
  }
  BOOST_TEST(rejects(dir / "tiny.safetensors", [](const std::string& s) { return contains(s, "8-byte header size"); }));
  // torch.save's files (their first bytes, as PyTorch 1.13 writes them): named, with the way to convert.
  const auto starting_with = [&](const char* name, std::initializer_list<unsigned char> head) {
    std::ofstream f(dir / name, std::ios::binary);
    for (const unsigned char c : head) f.put(static_cast<char>(c));
    f << std::string(64, '\0');
    return dir / name;
  };
  BOOST_TEST(rejects(starting_with("zip.pt", {0x50, 0x4b, 0x03, 0x04, 0x00, 0x00, 0x08, 0x08}), [](const std::string& s) {
    return contains(s, "zip.pt: at offset 0: header size ") &&
           contains(s, "a zip archive, as torch.save writes (.pt, .pth), not safetensors; save a state_dict as "
                       "safetensors in Python: safetensors.torch.save_file(model.state_dict(), path)");
  }));
  BOOST_TEST(rejects(starting_with("legacy.pt", {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46}), [](const std::string& s) {
    return contains(s, "a pickle, as torch.save's legacy format writes, not safetensors");
  }));
  BOOST_TEST(rejects(starting_with("junk.safetensors", {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}),
                     [](const std::string& s) { return contains(s, "not a safetensors file, or a truncated one"); }));
  // Corrupt JSON: the byte position is named.
  {
    std::ofstream f(dir / "json.safetensors", std::ios::binary);
    const std::string text = "{\"0.weight\": [";
    const std::uint64_t n = text.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << text;
  }
  BOOST_TEST(rejects(dir / "json.safetensors", [](const std::string& s) { return contains(s, "header JSON at byte"); }));
  // A parameter missing.
  std::map<std::string, kiln::SafetensorsEntry> partial = kiln::read_safetensors(good);
  partial.erase("4.bias");
  kiln::write_safetensors(dir / "partial.safetensors", partial);
  BOOST_TEST(rejects(dir / "partial.safetensors", [](const std::string& s) { return contains(s, "missing parameter '4.bias'"); }));
  // A dtype that is not floating point (F16, BF16 and F64 are converted: below).
  auto as_int = kiln::read_safetensors(good);
  const std::vector<std::int32_t> b(1, 1);
  as_int["4.bias"] = kiln::make_entry<std::int32_t>(b, {1});
  kiln::write_safetensors(dir / "dtype.safetensors", as_int);
  BOOST_TEST(rejects(dir / "dtype.safetensors", [](const std::string& s) {
    return contains(s, "parameter '4.bias' is I32, expected a floating-point dtype (F16, BF16, F32 or F64; converted to F32)");
  }));
}

BOOST_AUTO_TEST_CASE(half_bfloat16_and_double_checkpoints_load_converted_as_torchs_load_state_dict) {
  // torch's load_state_dict copies a model.half() / .bfloat16() / .double() state_dict into a float
  // model, rounding to nearest; kiln's load_checkpoint does the same. Each parameter is written in one
  // of the three dtypes, from values that round differently in each.
  const auto dir = scratch("convert");
  kiln::nn::Model<Mlp, Shape<dyn, 13>> m(0);
  const auto want = m.parameters().to_vector();
  std::map<std::string, kiln::SafetensorsEntry> entries;
  std::vector<float> expected(want.size());
  int k = 0;
  for (const auto& p : m.named_parameters()) {
    const auto first = want.begin() + p.offset, last = first + p.count;
    auto out = expected.begin() + p.offset;
    // The parameter rounded to T on disk; the model should hold the rounded values.
    const auto as_low = [&]<class T>() {
      std::vector<T> low(static_cast<std::size_t>(p.count));
      std::transform(first, last, low.begin(), [](float v) { return kiln::from_compute<T>(v); });
      entries[p.name] = kiln::make_entry<T>(low, p.shape);
      for (const auto v : low) *out++ = kiln::to_compute(v);
    };
    switch (k++ % 3) {
      case 0:
        as_low.template operator()<kiln::half>();
        break;
      case 1:
        as_low.template operator()<kiln::bfloat16>();
        break;
      default: {
        std::vector<double> d(first, last);
        for (auto& v : d) v += 1e-12;  // not a float: rounds back to the float it came from
        entries[p.name] = kiln::make_entry<double>(d, p.shape);
        std::copy(first, last, out);
      }
    }
  }
  BOOST_TEST(k == 6);
  kiln::write_safetensors(dir / "mixed.safetensors", entries);
  kiln::nn::Model<Mlp, Shape<dyn, 13>> loaded(1);
  (void)kiln::load_checkpoint(dir / "mixed.safetensors", loaded);
  const auto got = loaded.parameters().to_vector();
  BOOST_TEST(got == expected, boost::test_tools::per_element());
  BOOST_TEST((got != want));  // (the half and bfloat16 values did round)
}

/// A safetensors file of the given header text followed by `data` bytes.
void write_raw(const fs::path& file, const std::string& header, std::size_t data) {
  std::ofstream f(file, std::ios::binary);
  const std::uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header << std::string(data, '\x3f');
}

/// read_safetensors of a file with this header rejects it with a CheckpointError that names the file and
/// holds `part`.
bool header_rejected(const fs::path& dir, const std::string& header, std::size_t data, const std::string& part) {
  const auto file = dir / "raw.safetensors";
  write_raw(file, header, data);
  try {
    kiln::read_safetensors(file);
  } catch (const kiln::CheckpointError& e) {
    const std::string msg = e.what();
    BOOST_TEST_MESSAGE(msg);
    return contains(msg, file.string()) && contains(msg, part);
  }
  return false;
}

BOOST_AUTO_TEST_CASE(every_header_field_of_the_wrong_kind_is_a_checkpoint_error_naming_it) {
  // Each of these once escaped as nlohmann::json's own exception, or was taken (tests/fuzz/fuzz_safetensors).
  const auto dir = scratch("fields");
  const std::string ok_offsets = R"("data_offsets":[0,8]}})";
  BOOST_TEST(header_rejected(dir, R"({"w":{"dtype":7,"shape":[2],)" + ok_offsets, 8, "tensor 'w': dtype must be a string"));
  BOOST_TEST(header_rejected(dir, R"({"w":{"dtype":"F32","shape":{"a":2},)" + ok_offsets, 8, "shape must be an array"));
  BOOST_TEST(header_rejected(dir, R"({"w":{"dtype":"F32","shape":[2.0],)" + ok_offsets, 8, "shape entries must be integers"));
  BOOST_TEST(header_rejected(dir, R"({"w":{"dtype":"F32","shape":[-2],)" + ok_offsets, 8, "shape entries must be integers"));
  BOOST_TEST(header_rejected(dir, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":["0",8]}})", 8, "data_offsets must be [begin, end]"));
  BOOST_TEST(header_rejected(dir, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0.5,8]}})", 8, "data_offsets must be [begin, end]"));
  BOOST_TEST(header_rejected(dir, R"({"w":{"dtype":"F32","shape":[2]}})", 8, "no \"data_offsets\""));
  BOOST_TEST(header_rejected(dir, R"({"w":[1,2]})", 8, "expected an object with dtype, shape and data_offsets"));
  BOOST_TEST(header_rejected(dir, R"({"__metadata__":{"epoch":3}})", 0, "must map names to strings"));
  BOOST_TEST(header_rejected(dir, R"(null)", 0, "must be a JSON object"));
  BOOST_TEST(header_rejected(dir, R"({"w":{"dtype":"F32","shape":[1e400],)" + ok_offsets, 8, "header JSON"));
  // A shape whose product wraps around 64 bits to the bytes given is not taken for them.
  BOOST_TEST(header_rejected(dir, R"({"w":{"dtype":"F32","shape":[4611686018427387904,4,1],"data_offsets":[0,0]}})", 0,
                             "needs more than the 0 data bytes"));
  BOOST_TEST(header_rejected(dir, R"({"w":{"dtype":"F32","shape":[4611686018427387904,2],)" + ok_offsets, 8,
                             "needs more than the 8 data bytes"));
  // A zero extent makes an empty tensor, whatever the others are.
  write_raw(dir / "empty.safetensors", R"({"w":{"dtype":"F32","shape":[4611686018427387904,0],"data_offsets":[0,0]}})", 0);
  BOOST_TEST(kiln::read_safetensors(dir / "empty.safetensors").at("w").bytes.empty());
}

BOOST_AUTO_TEST_CASE(a_header_the_reference_reader_refuses_is_refused_with_its_byte) {
  const auto dir = scratch("reference");
  const std::string w = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  // Nothing before the object but JSON's whitespace (safetensors 0.8 reads " \n\t\r{", and refuses a
  // byte-order mark or a form feed).
  BOOST_TEST(header_rejected(dir, "\xEF\xBB\xBF{" + w + "}", 8, "header JSON at byte 8: 0xEF; expected '{'"));
  BOOST_TEST(header_rejected(dir, " \f{" + w + "}", 8, "header JSON at byte 9:"));  // (nlohmann's parser refuses it)
  write_raw(dir / "spaced.safetensors", " \n\t\r{" + w + "}", 8);
  BOOST_TEST(kiln::read_safetensors(dir / "spaced.safetensors").at("w").shape == (std::vector<kiln::index_t>{2}));
  // A JSON error names the byte where it is, counted from the file's start (the 'x' is byte 9).
  BOOST_TEST(header_rejected(dir, "{x}", 0, "header JSON at byte 9:"));
  // An array of more than 64 items (a shape of 65 dimensions) is refused before it is parsed: ten
  // million zeros would cost half a gigabyte parsed. 64 dimensions are taken.
  std::string dims;
  for (int k = 0; k < 65; ++k) dims += k ? ",1" : "1";
  BOOST_TEST(header_rejected(dir, R"({"w":{"dtype":"F32","shape":[)" + dims + R"(],"data_offsets":[0,4]}})",
                             4, "an array of more than 64 items"));
  dims.resize(dims.size() - 2);
  write_raw(dir / "64.safetensors", R"({"w":{"dtype":"F32","shape":[)" + dims + R"(],"data_offsets":[0,4]}})",
            4);
  BOOST_TEST(kiln::read_safetensors(dir / "64.safetensors").at("w").shape.size() == 64u);
  // A read that fails leaves the caller's metadata as it was; one that succeeds replaces it.
  std::map<std::string, std::string> meta{{"old", "kept"}};
  write_raw(dir / "bad_meta.safetensors",
            R"({"__metadata__":{"a":"b"},"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
  BOOST_CHECK_THROW(kiln::read_safetensors(dir / "bad_meta.safetensors", &meta), kiln::CheckpointError);
  BOOST_TEST((meta == std::map<std::string, std::string>{{"old", "kept"}}));
  kiln::write_safetensors(dir / "meta.safetensors", {}, {{"epoch", "3"}});
  kiln::read_safetensors(dir / "meta.safetensors", &meta);
  BOOST_TEST((meta == std::map<std::string, std::string>{{"epoch", "3"}}));
  // Bytes after the last tensor: their offset and what was expected.
  BOOST_TEST(header_rejected(dir, "{" + w + "}", 12, "4 bytes after the last tensor, at offset"));
}

BOOST_AUTO_TEST_CASE(an_extra_entry_cannot_take_a_parameters_name) {
  // It would be overwritten by the parameter, and the file would list it as the caller's.
  const auto dir = scratch("extra_name");
  kiln::nn::Model<Mlp, Shape<dyn, 13>> m(0);
  std::map<std::string, kiln::SafetensorsEntry> extra;
  const std::vector<float> values(16, 7.0f);
  extra["0.bias"] = kiln::make_entry<float>(std::span<const float>(values), {16});
  BOOST_CHECK_EXCEPTION(kiln::save_checkpoint(dir / "c.safetensors", m, extra), kiln::CheckpointError,
                        [](const kiln::CheckpointError& e) {
                          return contains(e.what(),
                                          "the extra entry '0.bias' has the name of one of the model's");
                        });
  BOOST_TEST(!fs::exists(dir / "c.safetensors"));
  BOOST_TEST(temporary_files(dir) == 0);
}

BOOST_AUTO_TEST_CASE(every_whole_byte_dtype_reads_and_no_tensors_round_trip) {
  // PyTorch checkpoints may carry int8 or bool buffers next to the parameters: they read (as bytes).
  const auto dir = scratch("dtypes");
  write_raw(dir / "mixed.safetensors",
            R"({"b":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]},"q":{"dtype":"I8","shape":[1],"data_offsets":[3,4]},)"
            R"("u":{"dtype":"U16","shape":[2],"data_offsets":[4,8]}})",
            8);
  const auto t = kiln::read_safetensors(dir / "mixed.safetensors");
  BOOST_TEST(t.size() == 3u);
  BOOST_TEST(t.at("u").bytes.size() == 4u);
  // Written back, the data goes as the reference writer puts it: by dtype in safetensors' order, highest
  // first (U16, I8, BOOL), so each tensor starts at a multiple of its element size.
  kiln::write_safetensors(dir / "mixed_again.safetensors", t);
  BOOST_TEST(kiln::read_safetensors(dir / "mixed_again.safetensors").at("b").bytes == t.at("b").bytes);
  {
    std::ifstream f(dir / "mixed_again.safetensors", std::ios::binary);
    std::uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    std::string text(n, '\0');
    f.read(text.data(), static_cast<std::streamsize>(n));
    const auto header = nlohmann::json::parse(text);
    BOOST_TEST(header["u"]["data_offsets"] == nlohmann::json({0, 4}));
    BOOST_TEST(header["q"]["data_offsets"] == nlohmann::json({4, 5}));
    BOOST_TEST(header["b"]["data_offsets"] == nlohmann::json({5, 8}));
  }
  BOOST_TEST(header_rejected(dir, R"({"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", 1, "unsupported dtype \"F4\" (kiln reads U64, I64, F64, F32"));
  // No tensors: the header is {} (it was null, which no reader takes).
  kiln::write_safetensors(dir / "none.safetensors", {});
  BOOST_TEST(kiln::read_safetensors(dir / "none.safetensors").empty());
  std::map<std::string, std::string> meta;
  kiln::write_safetensors(dir / "meta.safetensors", {}, {{"epoch", "3"}});
  BOOST_TEST(kiln::read_safetensors(dir / "meta.safetensors", &meta).empty());
  BOOST_TEST(meta.at("epoch") == "3");
  BOOST_TEST(temporary_files(dir) == 0);
  // The writer refuses shapes the reader would: negative extents, a product that wraps (2^32 x 2^32 is
  // 0 mod 2^64, so 0 bytes matched it).
  const auto wrote_bad = [&](std::vector<kiln::index_t> shape, std::size_t bytes) {
    kiln::SafetensorsEntry e{"U8", std::move(shape), std::vector<std::uint8_t>(bytes)};
    try {
      kiln::write_safetensors(dir / "bad.safetensors", {{"x", e}});
    } catch (const kiln::CheckpointError& error) {
      return std::string(error.what()).find("whose product memory can address") != std::string::npos;
    }
    return false;
  };
  BOOST_TEST(wrote_bad({-1, -4}, 4));
  BOOST_TEST(wrote_bad({kiln::index_t{1} << 32, kiln::index_t{1} << 32}, 0));
  BOOST_TEST(!std::filesystem::exists(dir / "bad.safetensors"));
  kiln::write_safetensors(dir / "empty.safetensors", {{"x", {"U8", {kiln::index_t{1} << 40, 0}, {}}}});
  BOOST_TEST(kiln::read_safetensors(dir / "empty.safetensors").at("x").bytes.empty());
}

BOOST_AUTO_TEST_CASE(a_deeply_nested_header_is_a_checkpoint_error_not_a_crash) {
  // nlohmann's parser takes any depth, at about 70 bytes a level: the reader refuses a 17th level before
  // parsing (20 MB of '[' took 1.4 GB; json::dump of such a value overflowed the stack).
  const auto dir = scratch("deep");
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  const std::string too_deep = "nests deeper than 16 levels";
  BOOST_TEST(header_rejected(dir, deep, 0, too_deep));
  BOOST_TEST(header_rejected(dir, R"({"w":{"dtype":)" + deep + R"(,"shape":[1],"data_offsets":[0,4]}})", 4, too_deep));
  BOOST_TEST(header_rejected(dir, R"({"w":{"dtype":"F32","shape":[{"a":)" + deep + R"(}],"data_offsets":[0,4]}})", 4,
                             too_deep));
  BOOST_REQUIRE(reset_peak());
  const long before = peak_mib();
  BOOST_TEST(header_rejected(dir, std::string(20'000'000, '['), 0, too_deep));  // no closing brackets needed
  BOOST_TEST(peak_mib() - before < 128, "peak memory grew by " << peak_mib() - before << " MiB");
  // 16 levels still parse (the header object, an entry, 14 arrays), 17 do not; brackets in strings
  // do not count.
  const auto nested = [](int n) { return std::string(n, '[') + std::string(n, ']'); };
  BOOST_TEST(header_rejected(dir, R"({"w":{"dtype":)" + nested(14) + R"(,"shape":[1],"data_offsets":[0,4]}})", 4,
                             "dtype must be a string such as \"F32\", got [[[["));
  BOOST_TEST(header_rejected(dir, R"({"w":{"dtype":)" + nested(15) + R"(,"shape":[1],"data_offsets":[0,4]}})", 4,
                             "header JSON at byte 36 nests deeper than 16 levels"));
  BOOST_TEST(header_rejected(dir, R"({"w":{"dtype":")" + std::string(100, '[') + R"(\"[{","shape":[1],"data_offsets":[0,4]}})",
                             4, "unsupported dtype"));
}

/// The peak-memory checks need the plain allocator: ASan's shadow and quarantine add their own (a
/// sanitize build reports the case skipped).
boost::test_tools::assertion_result peak_memory_is_measurable(boost::unit_test::test_unit_id) {
#if defined(__SANITIZE_ADDRESS__)
  boost::test_tools::assertion_result r(false);
  r.message() << "AddressSanitizer's allocator inflates the peak resident memory this case measures";
  return r;
#else
  return true;
#endif
}

BOOST_AUTO_TEST_CASE(a_header_costs_memory_for_what_it_holds_not_for_what_it_nests,
                     *boost::unit_test::precondition(peak_memory_is_measurable)) {
  // An entry's fields besides dtype, shape and data_offsets are skipped unbuilt, as the reference reader
  // ignores them: 20 MB of `{},` in one took 540 MB parsed (27 bytes for each byte of text).
  const auto dir = scratch("costs");
  const auto times = [](const std::string& item, int n) {  // [item,item,...]: arrays of 64 items at most
    std::string a = "[";
    for (int k = 0; k < n; ++k) a += (k ? "," : "") + item;
    return a + "]";
  };
  const std::string objects = times("{}", 64);
  const std::string extra = times(times(times(objects, 64), 64), 26);  // 20 MB
  const std::string w = R"({"dtype":"U8","shape":[2],"data_offsets":[0,2])";
  write_raw(dir / "extra.safetensors", R"({"w":)" + w + R"(,"x":)" + extra + R"(,"y":7}})", 2);
  BOOST_REQUIRE(reset_peak());
  const long before = peak_mib();
  const auto read = kiln::read_safetensors(dir / "extra.safetensors");
  BOOST_TEST(peak_mib() - before < 128, "peak memory grew by " << peak_mib() - before << " MiB");
  BOOST_TEST(read.at("w").shape == std::vector<kiln::index_t>{2});
  // Nested values where a header has none (here a shape's entries) are as costly: the header is refused
  // at the first, in the order of the file (not the tensors' sorted names), showing what it is.
  std::string header = "{";
  for (int k = 0; header.size() < 20'000'000; ++k)
    header += (k ? ",\"z" : "\"z") + std::to_string(k) + R"(":{"dtype":"U8","shape":)" + objects + R"(,"data_offsets":[0,2]})";
  header += R"(,"a":{"dtype":{"x":1},"shape":[2],"data_offsets":[0,2]}})";
  BOOST_REQUIRE(reset_peak());
  BOOST_TEST(header_rejected(dir, header, 2, "tensor 'z0': shape entries must be integers >= 0, got {}"));
  BOOST_TEST(peak_mib() - before < 128, "peak memory grew by " << peak_mib() - before << " MiB");
  BOOST_TEST(header_rejected(dir, R"({"b":{"dtype":"U8","shape":[[1,2]],"data_offsets":[0,2]},"a":{"dtype":{"x":1}}})",
                             2, "tensor 'b': shape entries must be integers >= 0, got [1,2]"));
  // Such a value shows as it is, to 40 characters.
  std::string items;
  for (int k = 0; k < 60; ++k) items += (k ? "," : "") + std::to_string(k);
  BOOST_TEST(header_rejected(dir, R"({"w":)" + w + R"(},"v":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"x":0},"u":[)" +
                                      items + "]}", 2,
                             "tensor 'u': expected an object with dtype, shape and data_offsets, got "
                             "[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,1..."));
}

// nlohmann's parser stops at a NUL byte: JSON, a NUL and junk after it was read as a good header.
BOOST_AUTO_TEST_CASE(a_nul_byte_in_the_header_is_a_checkpoint_error_at_its_byte) {
  const auto dir = scratch("nul");
  const std::string json = R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  BOOST_TEST(header_rejected(dir, json + std::string(1, '\0') + "this is not JSON {{{ ]]", 2,
                             "header JSON at byte " + std::to_string(8 + json.size()) + ": a NUL byte"));
  BOOST_TEST(header_rejected(dir, json + std::string(1, '\0'), 2, "a NUL byte"));
}

// write_safetensors replaces the file a link names (the link stays, as write_file_atomically's) and keeps
// the permission bits of the file it replaces (a private checkpoint stays private).
BOOST_AUTO_TEST_CASE(a_checkpoint_through_a_link_replaces_its_file_and_keeps_the_files_mode) {
  const auto dir = scratch("link_mode");
  const std::map<std::string, kiln::SafetensorsEntry> one{{"w", {"U8", {2}, {1, 2}}}},
      two{{"w", {"U8", {3}, {3, 4, 5}}}};
  fs::create_directories(dir / "run3");
  const auto real = dir / "run3" / "ckpt.safetensors";
  kiln::write_safetensors(real, one);
  fs::permissions(real, fs::perms::owner_read | fs::perms::owner_write);
  fs::create_symlink(real, dir / "latest.safetensors");
  kiln::write_safetensors(dir / "latest.safetensors", two);
  BOOST_TEST(fs::is_symlink(fs::symlink_status(dir / "latest.safetensors")));
  BOOST_TEST(kiln::read_safetensors(real).at("w").bytes == std::vector<std::uint8_t>({3, 4, 5}));
  BOOST_TEST(((fs::status(real).permissions() & fs::perms::all) ==
              (fs::perms::owner_read | fs::perms::owner_write)));
  BOOST_TEST(std::distance(fs::directory_iterator(dir / "run3"), fs::directory_iterator()) ==
             1);                                          // no temporary left
  kiln::write_safetensors(dir / "new.safetensors", one);  // a new file: 0666 less the umask, as before
  BOOST_TEST(((fs::status(dir / "new.safetensors").permissions() & fs::perms::owner_write) ==
              fs::perms::owner_write));
  // Not a regular file (a FIFO here; as root the rename once replaced /dev/null itself): refused, untouched.
  BOOST_REQUIRE(::mkfifo((dir / "pipe").c_str(), 0600) == 0);
  BOOST_CHECK_EXCEPTION(
      kiln::write_safetensors(dir / "pipe", one), kiln::CheckpointError,
      [](const kiln::CheckpointError& e) { return contains(e.what(), "pipe: not a regular file"); });
  BOOST_TEST(fs::is_fifo(fs::symlink_status(dir / "pipe")));
  // A folder, and links that name each other, are said as what they are.
  fs::create_directories(dir / "folder");
  BOOST_CHECK_EXCEPTION(
      kiln::write_safetensors(dir / "folder", one), kiln::CheckpointError,
      [](const kiln::CheckpointError& e) { return contains(e.what(), "folder: a directory;"); });
  fs::create_symlink(dir / "loop_b", dir / "loop_a");
  fs::create_symlink(dir / "loop_a", dir / "loop_b");
  BOOST_CHECK_EXCEPTION(
      kiln::write_safetensors(dir / "loop_a", one), kiln::CheckpointError,
      [](const kiln::CheckpointError& e) { return contains(e.what(), "loop_a: a loop of symbolic links;"); });
}

BOOST_AUTO_TEST_CASE(header_limits_null_metadata_and_the_overlap_names) {
  const auto dir = scratch("limits");
  // Over the reference reader's 100,000,000 bytes (a sparse file that is large enough).
  const auto big = dir / "big.safetensors";
  {
    std::ofstream f(big, std::ios::binary);
    const std::uint64_t n = 100'000'001;
    f.write(reinterpret_cast<const char*>(&n), 8);
  }
  fs::resize_file(big, 8 + 100'000'001);
  BOOST_CHECK_EXCEPTION(kiln::read_safetensors(big), kiln::CheckpointError, [](const kiln::CheckpointError& e) {
    return contains(e.what(), "header size 100000001 is over the 100000000 bytes");
  });
  fs::remove(big);
  // "__metadata__": null is no metadata, as the reference reader takes it.
  write_raw(dir / "null_meta.safetensors", R"({"__metadata__":null,"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2);
  std::map<std::string, std::string> meta;
  BOOST_TEST(kiln::read_safetensors(dir / "null_meta.safetensors", &meta).at("w").bytes.size() == 2u);
  BOOST_TEST(meta.empty());
  // Overlaps and gaps name both tensors.
  BOOST_TEST(header_rejected(dir, R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 6,
                             "tensor 'b' starts at data byte 2, expected 4, inside 'a' (the two overlap)"));
  BOOST_TEST(header_rejected(dir, R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})", 6,
                             "tensor 'b' starts at data byte 4, expected 2, where 'a' ends (a gap)"));
  BOOST_TEST(header_rejected(dir, R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})", 3,
                             "tensor 'a' starts at data byte 1, expected 0 (the start of the data)"));
  // A name that is not UTF-8 cannot go into the JSON header: a CheckpointError, and no file.
  kiln::SafetensorsEntry e{"U8", {1}, {7}};
  BOOST_CHECK_EXCEPTION(kiln::write_safetensors(dir / "latin1.safetensors", {{"caf\xe9", e}}), kiln::CheckpointError,
                        [](const kiln::CheckpointError& error) { return contains(error.what(), "must be UTF-8"); });
  BOOST_TEST(!fs::exists(dir / "latin1.safetensors"));
  BOOST_TEST(temporary_files(dir) == 0);
}

BOOST_AUTO_TEST_CASE(repeated_keys_reversed_offsets_and_control_characters_are_named) {
  const auto dir = scratch("names");
  const std::string a = R"({"dtype":"U8","shape":[2],"data_offsets":[0,2]})";
  const std::string b = R"({"dtype":"U8","shape":[2],"data_offsets":[2,4]})";
  // JSON keeps the last of two equal keys; a header that names a tensor twice is ambiguous, refused as
  // such (not as an overlap or a gap of the entry it hid), also when both entries are the same.
  BOOST_TEST(header_rejected(dir, R"({"w":)" + a + R"(,"w":)" + a + "}", 2,
                             "two entries for tensor 'w'; a name must be unique"));
  BOOST_TEST(header_rejected(dir, R"({"w":)" + a + R"(,"v":)" + b + R"(,"w":)" + b + "}", 4,
                             "two entries for tensor 'w'"));
  BOOST_TEST(header_rejected(dir, R"({"__metadata__":{"a":"1"},"__metadata__":{"a":"2"}})", 0,
                             "two \"__metadata__\" entries"));
  BOOST_TEST(header_rejected(dir, R"({"__metadata__":{"a":"1","a":"2"}})", 0, "\"__metadata__\" has \"a\" twice"));
  BOOST_TEST(header_rejected(dir, R"({"w":{"dtype":"U8","dtype":"F32","shape":[2],"data_offsets":[0,2]}})", 2,
                             "tensor 'w' has \"dtype\" twice"));
  // Offsets that end before they begin are that, not a truncated file.
  BOOST_TEST(header_rejected(dir, R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[4,2]}})", 4,
                             "tensor 'w': data_offsets [4, 2] end before they begin"));
  // A control character in a name (a NUL would end the message for a C-string reader) is escaped, and
  // the message goes on to say what is wrong.
  BOOST_TEST(header_rejected(dir, R"({"a\u0000b":{"dtype":"X9","shape":[2],"data_offsets":[0,2]}})", 2,
                             "tensor 'a\\u0000b': unsupported dtype \"X9\""));
}

BOOST_AUTO_TEST_CASE(entries_that_claim_the_same_bytes_are_rejected_before_any_is_read) {
  // 2048 tensors of 1 MiB, all at data bytes [0, 1 MiB): a 1 MiB file that claims 2 GiB. The layout is
  // checked before any tensor's bytes are allocated, so the error costs no memory.
  const auto dir = scratch("overlap");
  std::string header = "{";
  for (int i = 0; i < 2048; ++i)
    header += (i ? "," : "") + std::string("\"t") + std::to_string(i) +
              R"(":{"dtype":"U8","shape":[1048576],"data_offsets":[0,1048576]})";
  header += "}";
  BOOST_REQUIRE(reset_peak());
  const long before = peak_mib();
  BOOST_REQUIRE(before > 0);
  BOOST_TEST(header_rejected(dir, header, 1 << 20, "tensor data must be contiguous"));
  BOOST_TEST(peak_mib() - before < 256, "peak memory grew by " << peak_mib() - before << " MiB");
}

BOOST_AUTO_TEST_CASE(writers_saving_to_one_path_each_publish_a_whole_file) {
  // Each writer has a temporary file of its own (the shared name "<file>.tmp" let one rename publish a
  // file another was still writing, and the other's rename fail).
  const auto dir = scratch("writers");
  const auto file = dir / "shared.safetensors";
  std::vector<std::string> errors(2);
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w)
    writers.emplace_back([&, w] {
      const std::vector<float> values(4096, static_cast<float>(w));
      try {
        for (int k = 0; k < 20; ++k) kiln::write_safetensors(file, {{"w", kiln::make_entry<float>(values, {4096})}});
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(w)] = e.what();
      }
    });
  for (auto& t : writers) t.join();
  BOOST_TEST(errors[0].empty(), errors[0]);
  BOOST_TEST(errors[1].empty(), errors[1]);
  const auto t = kiln::read_safetensors(file);  // whole: one writer's values throughout
  const auto& bytes = t.at("w").bytes;
  BOOST_REQUIRE_EQUAL(bytes.size(), 4096u * 4u);
  BOOST_TEST(std::equal(bytes.begin() + 4, bytes.end(), bytes.begin()));
  BOOST_TEST(temporary_files(dir) == 0);
  // A folder or a pipe is not a checkpoint (a pipe is refused before it is opened, which would wait for a
  // writer), and a folder that does not exist leaves nothing behind.
  BOOST_CHECK_EXCEPTION(kiln::read_safetensors(dir), kiln::CheckpointError, [&](const kiln::CheckpointError& e) {
    return contains(e.what(), dir.string() + ": a directory; expected a safetensors file");
  });
  BOOST_REQUIRE(::mkfifo((dir / "pipe.safetensors").c_str(), 0600) == 0);
  BOOST_CHECK_EXCEPTION(kiln::read_safetensors(dir / "pipe.safetensors"), kiln::CheckpointError,
                        [](const kiln::CheckpointError& e) {
                          return contains(e.what(), "pipe.safetensors: not a regular file (a pipe or a device?)");
                        });
  BOOST_CHECK_THROW(kiln::write_safetensors(dir / "absent" / "x.safetensors", {}), kiln::CheckpointError);
  // An empty path (an unset option): said as such, not a message with a blank name.
  BOOST_CHECK_EXCEPTION(kiln::read_safetensors(""), kiln::CheckpointError, [](const kiln::CheckpointError& e) {
    return contains(e.what(), "kiln: cannot open \"\": the path is empty");
  });
  BOOST_CHECK_EXCEPTION(kiln::write_safetensors("", {}), kiln::CheckpointError, [](const kiln::CheckpointError& e) {
    return contains(e.what(), "kiln: cannot write a checkpoint to \"\": the path is empty");
  });
}

BOOST_AUTO_TEST_SUITE_END()
