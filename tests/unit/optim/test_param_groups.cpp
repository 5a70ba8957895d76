// Parameter groups (kiln/optim/param_groups.hpp, torch's param_groups / add_param_group): each group's
// parameters step with its lr and weight decay (element by element against the formula); a group with
// lr 0 holds; add_param_group checks everything before it changes anything (outside the arena, in two
// groups, negative options, torch's duplicate warning); kiln::Unfused and capturable optimizers refuse
// groups; parameters by name in any order; schedulers move a group added after them on from its lr as
// torch's chainable ones do, ReduceLROnPlateau reduces every group and keeps their lrs in its state;
// checkpoints keep every group's lr and refuse other groups. (PyTorch parity of every optimizer with
// groups, under schedulers too: test_parity_mlp.cpp, mlp_param_groups.json.)
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <kiln/io/optimizer_state.hpp>
#include <kiln/nn/nn.hpp>
#include <kiln/optim/optim.hpp>

#include "support/optimizer_checks.hpp"
#include "support/policies.hpp"
#include "support/reference.hpp"
#include "support/warnings.hpp"

namespace {
namespace param_groups_test {
namespace kt = kiln::test;
using kiln::dyn;
using kiln::Shape;
using kiln::Tensor;
using kiln::nn::ParameterInfo;

using Net = kiln::nn::Sequential<kiln::nn::Linear<4, 3>, kiln::nn::ReLU, kiln::nn::Linear<3, 2>>;
template <class D>
using Small = kiln::nn::Model<Net, Shape<dyn, 4>, kiln::Policy<kiln::Fp32, D>>;

template <class D>
Tensor<float, Shape<dyn>, D> arena(const std::vector<float>& v) {
  return Tensor<float, Shape<dyn>, D>::from(std::span<const float>(v),
                                            kiln::Extents<Shape<dyn>>(static_cast<kiln::index_t>(v.size())));
}

/// The model's parameters whose names pass `keep`.
template <class Model, class Keep>
std::vector<ParameterInfo> parameters_where(const Model& m, Keep keep) {
  std::vector<ParameterInfo> out;
  for (const auto& p : m.named_parameters())
    if (keep(p)) out.push_back(p);
  return out;
}
using Dev = std::tuple_element_t<0, kt::devices>;
using Arena = Tensor<float, Shape<dyn>, Dev>;
using all_optimizers = std::tuple<kiln::optim::SGD<float, Dev>, kiln::optim::Adam<float, Dev>,
                                  kiln::optim::AdamW<float, Dev>, kiln::optim::RMSprop<float, Dev>,
                                  kiln::optim::Adagrad<float, Dev>, kiln::optim::NAdam<float, Dev>,
                                  kiln::optim::RAdam<float, Dev>, kiln::optim::Adamax<float, Dev>,
                                  kiln::optim::Adadelta<float, Dev>>;

/// Elements [begin, end) of v.
std::vector<float> slice(const std::vector<float>& v, std::size_t begin, std::size_t end) {
  return {v.begin() + static_cast<std::ptrdiff_t>(begin), v.begin() + static_cast<std::ptrdiff_t>(end)};
}
}  // namespace param_groups_test
}  // namespace

BOOST_AUTO_TEST_SUITE(optim)
BOOST_AUTO_TEST_SUITE(param_groups)

using namespace param_groups_test;

// SGD (no momentum): p -= lr (g + wd p) with each parameter's group's lr and wd. Groups: the biases
// without weight decay (two spans of the arena), the second weight at lr 0.5; the first weight stays in
// group 0 (the optimizer's lr 0.1 and wd 0.1).
BOOST_AUTO_TEST_CASE_TEMPLATE(each_group_steps_with_its_lr_and_weight_decay, D, kt::devices) {
  Small<D> m(/*seed=*/3);
  const auto start = m.parameters().to_vector();
  const auto grad = kt::random_values<float>(start.size(), -1, 1, 41);
  m.gradients().copy_from(std::span<const float>(grad));
  kiln::optim::SGD opt(m, {.lr = 0.1, .weight_decay = 0.1});
  opt.add_param_group({.params = parameters_where(m, [](const auto& p) { return p.shape.size() == 1; }),
                       .weight_decay = 0.0});
  opt.add_param_group({.params = parameters_where(m, [](const auto& p) { return p.name == "2.weight"; }), .lr = 0.5});
  BOOST_TEST(opt.param_group_count() == 3u);
  BOOST_TEST(opt.group_lr(0) == 0.1);
  BOOST_TEST(opt.group_lr(1) == 0.1);  // unset: the optimizer's
  BOOST_TEST(opt.group_lr(2) == 0.5);
  BOOST_TEST(opt.group_weight_decay(1) == 0.0);
  BOOST_TEST(opt.group_weight_decay(2) == 0.1);
  BOOST_TEST((opt.group_parameter_names(1) == std::vector<std::string>{"0.bias", "2.bias"}));
  opt.step();
  const auto got = m.parameters().to_vector();
  for (const auto& p : m.named_parameters()) {
    const bool bias = p.shape.size() == 1, head = p.name == "2.weight";
    const double lr = head ? 0.5 : 0.1, wd = bias ? 0.0 : 0.1;
    for (kiln::index_t i = p.offset; i < p.offset + p.count; ++i) {
      const auto j = static_cast<std::size_t>(i);
      const double want = start[j] - lr * (grad[j] + wd * start[j]);
      BOOST_TEST(got[j] == want, p.name << "[" << i - p.offset << "]" << boost::test_tools::tolerance(1e-6));
    }
  }
}

// AdamW with a group at lr 0 (torch's way to hold layers while the others train): its parameters do not
// move, the decay included (1 - 0 wd); the others do.
BOOST_AUTO_TEST_CASE_TEMPLATE(a_group_at_lr_zero_holds_its_parameters, D, kt::devices) {
  Small<D> m(/*seed=*/5);
  const auto start = m.parameters().to_vector();
  kiln::optim::AdamW opt(m, {.lr = 1e-2, .weight_decay = 0.1});
  const auto frozen = parameters_where(m, [](const auto& p) { return p.name.starts_with("0."); });
  opt.add_param_group({.params = frozen, .lr = 0.0});
  for (int s = 0; s < 3; ++s) {
    m.gradients().copy_from(std::span<const float>(kt::random_values<float>(start.size(), -1, 1, 50 + s)));
    opt.step();
  }
  const auto got = m.parameters().to_vector();
  for (const auto& p : m.named_parameters())
    for (kiln::index_t i = p.offset; i < p.offset + p.count; ++i) {
      const auto j = static_cast<std::size_t>(i);
      if (p.name.starts_with("0."))
        BOOST_TEST(got[j] == start[j], p.name);
      else
        BOOST_TEST(got[j] != start[j], p.name);
    }
}

// Any optimizer with a group over the middle of its arena steps as three optimizers, one per stretch
// (the middle with the group's lr and weight decay), bit for bit: the parameters and every state arena
// after three steps.
BOOST_AUTO_TEST_CASE_TEMPLATE(a_group_steps_as_an_optimizer_of_its_own, Opt, all_optimizers) {
  constexpr std::size_t n = 1000, begin = 301, end = 650;
  typename Opt::options_type o{};
  o.lr = 0.01;
  o.weight_decay = 0.02;
  typename Opt::options_type middle_options = o;
  middle_options.lr = 0.05;
  middle_options.weight_decay = 0.0;
  const auto start = kt::random_values<float>(n, -1, 1, 90);
  auto p = arena<Dev>(start);
  Arena g(static_cast<kiln::index_t>(n));
  Opt whole(p, g, o);
  whole.add_param_group({.params = {ParameterInfo{"middle", begin, end - begin, {end - begin}}},
                         .lr = middle_options.lr, .weight_decay = middle_options.weight_decay});
  const std::size_t cuts[4] = {0, begin, end, n};
  std::vector<Arena> ps, gs;
  for (int k = 0; k < 3; ++k) {
    ps.push_back(arena<Dev>(slice(start, cuts[k], cuts[k + 1])));
    gs.emplace_back(static_cast<kiln::index_t>(cuts[k + 1] - cuts[k]));
  }
  Opt first(ps[0], gs[0], o), second(ps[1], gs[1], middle_options), third(ps[2], gs[2], o);
  Opt* parts[3] = {&first, &second, &third};
  for (std::uint32_t s = 0; s < 3; ++s) {
    const auto grad = kt::random_values<float>(n, -1, 1, 91 + s);
    g.copy_from(std::span<const float>(grad));
    for (int k = 0; k < 3; ++k) gs[k].copy_from(std::span<const float>(slice(grad, cuts[k], cuts[k + 1])));
    whole.step();
    for (auto* part : parts) part->step();
  }
  const auto joined = [&](auto of) {
    std::vector<float> all;
    for (auto* part : parts) {
      const auto v = of(*part);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  std::vector<float> params;
  for (const auto& q : ps) {
    const auto v = q.to_vector();
    params.insert(params.end(), v.begin(), v.end());
  }
  BOOST_TEST((p.to_vector() == params));
  const auto states = kt::state_of(whole);
  for (std::size_t i = 0; i < states.size(); ++i) {
    if (states[i].empty()) continue;
    BOOST_TEST((states[i] == joined([i](auto& part) { return kt::state_of(part)[i]; })), "state arena " << i);
  }
}

BOOST_AUTO_TEST_CASE(add_param_group_checks_before_it_changes_anything) {
  Small<kiln::Cpu> m(/*seed=*/1);
  kiln::optim::Adam opt(m, {.lr = 1e-3});
  const auto named = m.named_parameters();
  opt.add_param_group({.params = {named[1]}, .lr = 1e-2});
  const auto refused = [&](const kiln::optim::ParamGroup& g, const std::string& words) {
    try {
      opt.add_param_group(g);
      BOOST_ERROR("no error for a group that should be refused: " << words);
    } catch (const kiln::ValueError& e) {
      BOOST_TEST(std::string(e.what()).find(words) != std::string::npos, e.what());
    }
    BOOST_TEST(opt.param_group_count() == 2u);
  };
  refused({.params = {named[0], named[1]}}, "some parameters appear in more than one parameter group ('0.bias' is in group 1)");
  refused({.params = {ParameterInfo{"elsewhere", 20, 10, {10}}}},
          "parameter 'elsewhere' (offset 20, 10 elements) is not in the optimizer's 23 parameters");
  refused({.params = {ParameterInfo{"0.weight", 0, 0, {}}}},  // an entry made by hand: no offset or count
          "parameter '0.weight' has no elements; give entries of the model's named_parameters()");
  refused({.params = {"0.weight", "fc.weight"}},
          "the model has no parameter 'fc.weight'; its parameters are 0.weight, 0.bias, 2.weight, 2.bias");
  Small<kiln::Cpu> other(/*seed=*/1);  // the same type, another arena
  refused({.params = {other.named_parameters()[0]}}, "parameter '0.weight' is another model's");
  refused({.params = {named[0]}, .lr = -1.0}, "Invalid learning rate: -1.000000");
  refused({.params = {named[0]}, .weight_decay = -0.5}, "Invalid weight_decay value: -0.500000");
  try {
    (void)opt.group_lr(2);
    BOOST_ERROR("group 2 does not exist");
  } catch (const kiln::ValueError& e) {
    BOOST_TEST(std::string(e.what()).find("parameter group 2 does not exist; the optimizer has 2") != std::string::npos,
               e.what());
  }
  // A parameter named twice counts once, with torch's warning.
  const kt::CollectWarnings warnings;
  opt.add_param_group({.params = {named[2], named[2]}, .lr = 0.5});
  BOOST_TEST(warnings.count() == 1u);
  BOOST_TEST(opt.param_group_count() == 3u);
  BOOST_TEST(opt.group_parameter_names(2).size() == 1u);
  // A group of nothing (a filter that matched none) is added, with a warning: the later groups' numbers.
  opt.add_param_group({.params = {}});
  BOOST_TEST(warnings.count() == 2u);
  BOOST_TEST(opt.param_group_count() == 4u);
}

// Parameters by name ("2.bias", torch's state_dict names) in any order: a group lists them in the
// arena's order (what checkpoints compare); group 0's are the rest. An optimizer built from arenas has
// no names.
BOOST_AUTO_TEST_CASE(parameters_by_name_in_any_order) {
  Small<kiln::Cpu> m(/*seed=*/1);
  kiln::optim::AdamW opt(m, {.lr = 1e-3});
  opt.add_param_group({.params = {"2.bias", "0.bias"}, .weight_decay = 0.0});
  const std::vector<std::string> names{"2.weight"};
  opt.add_param_group({.params = names, .lr = 1e-2});
  BOOST_TEST((opt.group_parameter_names(1) == std::vector<std::string>{"0.bias", "2.bias"}));
  BOOST_TEST((opt.group_parameter_names(2) == std::vector<std::string>{"2.weight"}));
  BOOST_TEST((opt.group_parameter_names(0) == std::vector<std::string>{"0.weight"}));
  BOOST_TEST(opt.group_initial_lr(2) == 1e-2);

  auto p = arena<kiln::Cpu>(std::vector<float>(10, 1.0f));
  Tensor<float, Shape<dyn>, kiln::Cpu> g(10);
  kiln::optim::Adam bare(p, g, {.lr = 1e-3});
  BOOST_CHECK_THROW(bare.add_param_group({.params = {"0.bias"}}), kiln::ValueError);
  BOOST_CHECK_THROW((void)bare.group_parameter_names(0), kiln::ValueError);
  bare.add_param_group({.params = {ParameterInfo{"tail", 6, 4, {4}}}, .lr = 0.0});  // by position: fine
  BOOST_TEST(bare.param_group_count() == 2u);
}

// A group added after the scheduler was built, at its epoch 3, goes on from the lr it was added with as
// torch 1.13's chainable schedules move it (its values, python above each): the base that puts it there.
BOOST_AUTO_TEST_CASE(a_group_added_later_goes_on_from_its_lr) {
  // torch: SGD([p0], lr=0.1); sched; 3 x (opt.step(); sched.step()); opt.add_param_group({"params": [p1],
  //        "lr": 1.0}); 3 x (opt.step(); sched.step()) -> [g["lr"] for g in opt.param_groups] each time
  const auto run = [](auto make, const std::vector<std::vector<double>>& want) {
    Small<kiln::Cpu> m(/*seed=*/2);
    kiln::optim::SGD opt(m, {.lr = 0.1});
    auto sched = make(opt);
    for (int s = 0; s < 3; ++s) {
      opt.step();
      sched.step();
    }
    opt.add_param_group({.params = {"2.weight"}, .lr = 1.0});
    for (const auto& lrs : want) {
      opt.step();
      sched.step();
      BOOST_TEST(opt.group_lr(0) == lrs[0], boost::test_tools::tolerance(1e-12));
      BOOST_TEST(opt.group_lr(1) == lrs[1], boost::test_tools::tolerance(1e-12));
    }
  };
  // StepLR(opt, 1, 0.5)
  run([](auto& o) { return kiln::optim::StepLR(o, 1, 0.5); },
      {{0.00625, 0.5}, {0.003125, 0.25}, {0.0015625, 0.125}});
  // CosineAnnealingLR(opt, 10, 1e-3)
  run([](auto& o) { return kiln::optim::CosineAnnealingLR(o, 10, 1e-3); },
      {{0.0657963412215599, 0.8246050659196387}, {0.0505, 0.6301782837494087},
       {0.03520365877844011, 0.43575150157917864}});
}

// Where kiln's late group differs from torch 1.13's (docs/models.md, Parameter groups): it moves as the
// groups the scheduler was built with do, from the base that put it at its lr, everywhere. torch's
// CosineAnnealingLR holds it at eta_min past T_max (its restart branch pairs base_lrs with the groups
// and skips it), and torch's SequentialLR keeps its lr at a milestone (step(0)'s closed form skips it)
// and scales the next schedule from there.
BOOST_AUTO_TEST_CASE(a_late_group_moves_as_the_others_past_t_max_and_across_milestones) {
  Small<kiln::Cpu> m(/*seed=*/2);
  const auto added_at = [&](auto& opt, auto& sched, int e) {
    for (int s = 0; s < e; ++s) {
      opt.step();
      sched.step();
    }
    opt.add_param_group({.params = {"2.weight"}, .lr = 0.05});
  };
  {  // CosineAnnealingLR(T_max = 6, eta_min = 1e-3), the group added at epoch 2: its distance to
     // eta_min keeps group 0's proportion through epoch 19 (torch 1.13: 1e-3 from epoch 7 on)
    kiln::optim::SGD opt(m, {.lr = 0.1});
    kiln::optim::CosineAnnealingLR sched(opt, 6, 1e-3);
    added_at(opt, sched, 2);
    const double ratio = (opt.group_lr(1) - 1e-3) / (opt.group_lr(0) - 1e-3);
    for (int e = 3; e < 20; ++e) {
      opt.step();
      sched.step();
      if (e % 6 == 0) continue;  // (both at eta_min)
      BOOST_TEST((opt.group_lr(1) - 1e-3) / (opt.group_lr(0) - 1e-3) == ratio, boost::test_tools::tolerance(1e-9));
    }
    BOOST_TEST(opt.group_lr(1) > 2e-3);  // epoch 19: rising again (torch 1.13: 1e-3)
  }
  {  // SequentialLR([ExponentialLR(0.8), StepLR(2, 0.5)], [5]): the group keeps group 0's proportion
     // across the milestone (torch 1.13: 2.44 times it from epoch 5 on)
    kiln::optim::SGD opt(m, {.lr = 0.1});
    kiln::optim::ExponentialLR decay(opt, 0.8);
    kiln::optim::StepLR steps(opt, 2, 0.5);
    kiln::optim::SequentialLR sched({5}, decay, steps);
    added_at(opt, sched, 2);
    const double ratio = opt.group_lr(1) / opt.group_lr(0);
    for (int e = 3; e < 10; ++e) {
      opt.step();
      sched.step();
      BOOST_TEST(opt.group_lr(1) / opt.group_lr(0) == ratio, boost::test_tools::tolerance(1e-12));
    }
  }
  {  // SequentialLR([ExponentialLR(0.5), MultiplicativeLR(0.9)], [2]) with a group there from the start at
     // a third of group 0's lr: the MultiplicativeLR goes on from each group's own lr (torch 1.13's step(0)).
    kiln::optim::SGD opt(m, {.lr = 0.3});
    opt.add_param_group({.params = parameters_where(m, [](const auto& p) { return p.name == "2.weight"; }), .lr = 0.1});
    const auto factor = [](std::int64_t) { return 0.9; };
    kiln::optim::SequentialLR sched({2}, kiln::optim::ExponentialLR(opt, 0.5), kiln::optim::MultiplicativeLR(opt, factor));
    for (int e = 0; e < 4; ++e) {
      opt.step();
      sched.step();
    }
    BOOST_TEST(opt.group_lr(0) == 0.3 * 0.5 * 0.9 * 0.9, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(opt.group_lr(1) == 0.1 * 0.5 * 0.9 * 0.9, boost::test_tools::tolerance(1e-12));
  }
}

// A late group that no base puts at its lr (a schedule at a factor of 0), or under a schedule torch's
// does not chain (LambdaLR; OneCycleLR's cycle has no base), keeps its lr.
BOOST_AUTO_TEST_CASE(a_late_group_keeps_its_lr_where_no_base_gets_there) {
  const auto run = [](auto make) {
    Small<kiln::Cpu> m(/*seed=*/2);
    kiln::optim::SGD opt(m, {.lr = 0.1});
    auto sched = make(opt);
    for (int s = 0; s < 2; ++s) {
      opt.step();
      sched.step();
    }
    opt.add_param_group({.params = {"2.weight"}, .lr = 0.5});
    for (int s = 0; s < 2; ++s) {
      opt.step();
      sched.step();
      BOOST_TEST(opt.group_lr(1) == 0.5);
      BOOST_TEST(sched.get_last_lr(1) == 0.5);
    }
    BOOST_TEST(kiln::detail::is_nan(sched.group_base_lrs().at(0)));
  };
  run([](auto& o) { return kiln::optim::LinearLR(o, 1.0, 0.0, 2); });  // factor 0 from epoch 2
  run([](auto& o) { return kiln::optim::LambdaLR(o, [](std::int64_t e) { return 1.0 / (1.0 + e); }); });
  run([](auto& o) { return kiln::optim::OneCycleLR(o, 1.0, 10); });
}

// The resume recipe with the scheduler built before the groups: the groups, added at epoch 0, start
// from the lrs they were added with, whatever lr a checkpoint then gives them; set_last_epoch(3) puts
// each at its schedule's lr of epoch 3.
BOOST_AUTO_TEST_CASE(a_resume_with_the_scheduler_built_first) {
  Small<kiln::Cpu> m(/*seed=*/2);
  kiln::optim::AdamW opt(m, {.lr = 1e-3});
  kiln::optim::CosineAnnealingLR sched(opt, /*T_max=*/10, /*eta_min=*/1e-5);
  opt.add_param_group({.params = {"0.bias", "2.bias"}, .lr = 2e-3, .weight_decay = 0.0});
  opt.set_group_lr(1, 1.5e-3);  // what a checkpoint of epoch 3 would restore
  sched.set_last_epoch(3);
  const double cosine = (1.0 + std::cos(std::numbers::pi * 3.0 / 10.0)) / 2.0;
  BOOST_TEST(opt.group_lr(0) == 1e-5 + (1e-3 - 1e-5) * cosine, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(opt.group_lr(1) == 1e-5 + (2e-3 - 1e-5) * cosine, boost::test_tools::tolerance(1e-12));
}

// kiln::Unfused steps the whole arena in torch's single-tensor passes with one lr: with groups it throws
// before the step (nothing moves, the step count stays); a capturable optimizer refuses groups.
BOOST_AUTO_TEST_CASE(unfused_steps_and_capturable_optimizers_refuse_groups) {
  Small<kiln::Cpu> m(/*seed=*/2);
  kiln::optim::Adam opt(m, {.lr = 1e-3});
  opt.add_param_group({.params = {m.named_parameters()[0]}, .lr = 1e-2});
  m.gradients().fill(1.0f);
  const auto before = m.parameters().to_vector();
  {
    kiln::Unfused off;
    BOOST_CHECK_THROW(opt.step(), kiln::ValueError);
  }
  BOOST_TEST(opt.step_count() == 0);
  BOOST_TEST(opt.step_calls() == 0);
  BOOST_TEST((m.parameters().to_vector() == before));
  opt.step();  // fused: fine
  BOOST_TEST(opt.step_count() == 1);

  kiln::optim::Adam capturable(m, {.lr = 1e-3, .capturable = true});
  BOOST_CHECK_THROW(capturable.add_param_group({.params = {m.named_parameters()[0]}}), kiln::ValueError);
  BOOST_TEST(capturable.param_group_count() == 1u);
}

// A scheduler moves every group from its lr when the scheduler was built; a group added after it, from
// its lr when the scheduler first sees it. get_last_lr(k) is torch's get_last_lr()[k].
BOOST_AUTO_TEST_CASE(schedulers_move_every_group) {
  Small<kiln::Cpu> m(/*seed=*/2);
  kiln::optim::SGD opt(m, {.lr = 0.1});
  opt.add_param_group({.params = {m.named_parameters()[0]}, .lr = 0.4});
  kiln::optim::StepLR sched(opt, /*step_size=*/1, /*gamma=*/0.5);
  opt.add_param_group({.params = {m.named_parameters()[1]}, .lr = 1.0});
  opt.step();
  sched.step();
  BOOST_TEST(opt.group_lr(0) == 0.05);
  BOOST_TEST(opt.group_lr(1) == 0.2);
  BOOST_TEST(opt.group_lr(2) == 0.5);
  BOOST_TEST(sched.get_last_lr(2) == 0.5);
  BOOST_TEST((sched.group_base_lrs() == std::vector<double>{0.4, 1.0}));
  BOOST_CHECK_THROW((void)sched.get_last_lr(3), kiln::ValueError);

  // A chain of factors and a warm-up around a schedule: each group from its own base lr.
  {
    kiln::optim::SGD chained_opt(m, {.lr = 0.1});
    chained_opt.add_param_group({.params = {m.named_parameters()[0]}, .lr = 0.4});
    kiln::optim::ChainedScheduler chain(kiln::optim::StepLR(chained_opt, 1, 0.5),
                                        kiln::optim::ExponentialLR(chained_opt, 0.9));
    chained_opt.step();
    chain.step();
    BOOST_TEST(chained_opt.group_lr(0) == 0.1 * 0.5 * 0.9, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(chained_opt.group_lr(1) == 0.4 * 0.5 * 0.9, boost::test_tools::tolerance(1e-12));
    kiln::optim::SGD warm_opt(m, {.lr = 0.1});
    warm_opt.add_param_group({.params = {m.named_parameters()[0]}, .lr = 0.4});
    kiln::optim::LinearWarmup warm(kiln::optim::ExponentialLR(warm_opt, 0.5), /*warmup_steps=*/2, /*start_factor=*/0.5);
    BOOST_TEST(warm_opt.group_lr(1) == 0.2, boost::test_tools::tolerance(1e-12));  // 0.4 x 0.5
    for (int s = 0; s < 3; ++s) {
      warm_opt.step();
      warm.step();
    }
    BOOST_TEST(warm_opt.group_lr(0) == 0.05, boost::test_tools::tolerance(1e-12));  // the decay's epoch 1
    BOOST_TEST(warm_opt.group_lr(1) == 0.2, boost::test_tools::tolerance(1e-12));
  }
  // Schedules built in another order than their arguments': every group starts from its lr before the
  // first one built (torch's initial_lr), not from what that one set.
  {
    kiln::optim::SGD o(m, {.lr = 0.1});
    o.add_param_group({.params = {"0.bias"}, .lr = 1.0});
    kiln::optim::LinearLR warm(o, /*start_factor=*/0.1, /*end_factor=*/1.0, /*total_iters=*/5);  // built first
    kiln::optim::ExponentialLR decay(o, 0.9);
    kiln::optim::ChainedScheduler chain(decay, warm);
    BOOST_TEST(o.group_lr(0) == 0.01, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(o.group_lr(1) == 0.1, boost::test_tools::tolerance(1e-12));
  }
  {
    kiln::optim::SGD o(m, {.lr = 0.1});
    o.add_param_group({.params = {"0.bias"}, .lr = 1.0});
    kiln::optim::ConstantLR hold(o, /*factor=*/0.5, /*total_iters=*/2);  // built first
    kiln::optim::ExponentialLR decay(o, 0.9);
    kiln::optim::SequentialLR seq({3}, decay, hold);  // torch: every group back to its initial lr
    BOOST_TEST(o.group_lr(0) == 0.1, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(o.group_lr(1) == 1.0, boost::test_tools::tolerance(1e-12));
  }

  // ReduceLROnPlateau: every group's lr times factor, floored at min_lr.
  kiln::optim::ReduceLROnPlateau plateau(opt, {.factor = 0.1, .patience = 0, .min_lr = 0.01});
  plateau.step(1.0);
  plateau.step(2.0);  // worse: reduce
  BOOST_TEST(opt.group_lr(0) == 0.01);  // 0.005, floored
  BOOST_TEST(opt.group_lr(1) == 0.02, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(opt.group_lr(2) == 0.05, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(plateau.get_last_lr(2) == 0.05, boost::test_tools::tolerance(1e-12));
  BOOST_CHECK_THROW((void)plateau.get_last_lr(3), kiln::ValueError);
  // Its state holds every group's lr; load_state gives them back, and refuses other groups.
  const auto saved = plateau.state();
  BOOST_TEST(saved.group_lrs.size() == 2u);
  opt.set_group_lr(2, 0.3);
  plateau.load_state(saved);
  BOOST_TEST(opt.group_lr(2) == 0.05, boost::test_tools::tolerance(1e-12));
  // The same through checkpoint metadata: the groups' lrs joined, exactly as they were.
  const auto meta = plateau.state("plateau.");
  BOOST_TEST(meta.at("plateau.group_lrs") == kiln::detail::shortest_text(opt.group_lr(1)) + "," +
                                                 kiln::detail::shortest_text(opt.group_lr(2)));
  const double lr1 = opt.group_lr(1), lr2 = opt.group_lr(2);
  opt.set_group_lr(1, 0.7);
  opt.set_group_lr(2, 0.3);
  plateau.load_state(meta, "plateau.");
  BOOST_TEST(opt.group_lr(1) == lr1);
  BOOST_TEST(opt.group_lr(2) == lr2);
  kiln::optim::SGD fewer(m, {.lr = 0.1});
  kiln::optim::ReduceLROnPlateau other(fewer);
  BOOST_CHECK_THROW(other.load_state(saved), kiln::ValueError);
  BOOST_CHECK_THROW(other.load_state(meta, "plateau."), kiln::ValueError);
}

// optimizer_state keeps every group's lr, weight decay and parameter names; loading restores the lrs
// into an optimizer with the same groups and refuses one with other groups, changing nothing.
BOOST_AUTO_TEST_CASE(checkpoints_keep_the_groups) {
  Small<kiln::Cpu> m(/*seed=*/2);
  const auto named = m.named_parameters();
  kiln::optim::AdamW a(m, {.lr = 1e-3});
  a.add_param_group({.params = {named[1], named[3]}, .lr = 2e-3, .weight_decay = 0.0});
  a.set_group_lr(1, 5e-4);  // a scheduler moved it
  const auto state = kiln::optimizer_state(a);
  BOOST_TEST(state.metadata.at("optimizer.param_groups") == "2");
  BOOST_TEST(state.metadata.at("optimizer.param_groups.1.params") == "0.bias,2.bias");
  BOOST_TEST(state.metadata.at("optimizer.param_groups.1.lr") == "5e-04");
  BOOST_TEST(state.metadata.at("optimizer.param_groups.1.weight_decay") == "0");

  kiln::optim::AdamW b(m, {.lr = 1e-3});
  b.add_param_group({.params = {named[1], named[3]}, .lr = 2e-3, .weight_decay = 0.0});
  kiln::load_optimizer_state(b, state.entries, state.metadata, "a.safetensors");
  BOOST_TEST(b.group_lr(1) == 5e-4);

  const auto refused = [&](auto& opt, const std::string& words) {
    try {
      kiln::load_optimizer_state(opt, state.entries, state.metadata, "a.safetensors");
      BOOST_ERROR("loaded into other groups: " << words);
    } catch (const kiln::CheckpointError& e) {
      BOOST_TEST(std::string(e.what()).find(words) != std::string::npos, e.what());
    }
  };
  kiln::optim::AdamW none(m, {.lr = 1e-3});
  refused(none, "the checkpoint's AdamW has 2 parameter groups, this one 1");
  kiln::optim::AdamW other(m, {.lr = 1e-3});
  other.add_param_group({.params = {named[1]}, .lr = 2e-3, .weight_decay = 0.0});
  refused(other, "the checkpoint's parameter group 1 holds '0.bias,2.bias', this one '0.bias'");
  BOOST_TEST(other.group_lr(1) == 2e-3);  // unchanged
  kiln::optim::AdamW decayed(m, {.lr = 1e-3});
  decayed.add_param_group({.params = {named[1], named[3]}, .lr = 2e-3});
  refused(decayed, "param_groups.1.weight_decay = 0, this one 0.01");
}

BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_SUITE_END()
