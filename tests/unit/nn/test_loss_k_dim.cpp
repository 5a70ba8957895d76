// torch's K-dimensional class losses (tests/parity/fixtures/losses_k_dim.json, torch 1.13): CrossEntropyLoss
// and NLLLoss of scores [N, C, d1, ..., dk] against labels [N, d1, ..., dk] (images [2, 4, 3, 5], sequences
// [3, 5, 4]) with ignore_index, class weights, label smoothing, sum and 'none', and probability targets of
// the scores' shape: the loss and the input gradient within 1e-5 (relative, floored at 1% of the tensor's
// scale), fused and unfused, on every device; labels of the wrong shape are a ShapeError naming both.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <kiln/nn/nn.hpp>

#include "support/loss_options.hpp"
#include "support/parity.hpp"
#include "support/policies.hpp"
#include "support/throws.hpp"

namespace {
namespace parity = kiln::test::parity;
namespace knn = kiln::nn;
using json = nlohmann::json;
using kiln::dyn;
using kiln::Extents;
using kiln::Shape;
using kiln::Tensor;

template <std::size_t R, class I = std::make_index_sequence<R>>
struct dyn_shape;
template <std::size_t R, std::size_t... I>
struct dyn_shape<R, std::index_sequence<I...>> {
  using type = Shape<(static_cast<void>(I), dyn)...>;
  static Extents<type> extents(const std::vector<long long>& e) {
    return Extents<type>(static_cast<kiln::index_t>(e.at(I))...);
  }
};

template <class T, std::size_t R, class D>
Tensor<T, typename dyn_shape<R>::type, D> tensor_of(const json& t) {
  const auto v = parity::values<T>(t);
  const auto host = Tensor<T, typename dyn_shape<R>::type, kiln::Cpu>::from(std::span<const T>(v),
                                                                          dyn_shape<R>::extents(parity::shape(t)));
  if constexpr (std::is_same_v<D, kiln::Cpu>) return host;
  else return host.template to<D>();
}

template <class V>
void check(const std::vector<V>& got, const json& want, const std::string& what) {
  const auto w = parity::values(want);
  const auto d = parity::compare(std::span<const V>(got), std::span<const float>(w),
                                 parity::scale_floor(std::span<const float>(w)));
  BOOST_TEST(d.max_rel <= 1e-5, what << ": " << parity::describe(d));
}

template <std::size_t R, class D, class Loss>
void run_case(const std::string& name, const json& c, const Loss& loss, bool none) {
  kiln::test::check_loss_options(c, loss, none, name);
  const auto x = tensor_of<float, R, D>(c.at("input"));
  const auto& t = c.at("target");
  const bool labels = parity::shape(t).size() == R - 1;
  for (const bool fused : {true, false}) {
    std::optional<kiln::Unfused> off;
    if (!fused) off.emplace();
    const std::string what = name + (fused ? "" : ", unfused");
    const auto run = [&](const auto& target) {
      if (none) {
        const auto dloss = tensor_of<float, R - 1, D>(c.at("grad_output"));
        check(loss.unreduced(x, target).to_vector(), c.at("loss"), what + " loss");
        check(loss.backward(x, target, dloss).to_vector(), c.at("grad"), what + " grad");
      } else {
        check(std::vector<float>{loss(x, target).item()}, json{{"shape", {1}}, {"values", {c.at("loss")}}},
              what + " loss");
        check(loss.backward(x, target).to_vector(), c.at("grad"), what + " grad");
      }
    };
    if (labels) {
      const auto v = t.at("values").get<std::vector<std::int64_t>>();
      run(Tensor<std::int64_t, typename dyn_shape<R - 1>::type, kiln::Cpu>::from(
              std::span<const std::int64_t>(v), dyn_shape<R - 1>::extents(parity::shape(t)))
              .template to<D>());
    } else if constexpr (std::is_same_v<Loss, knn::CrossEntropyLoss>) {
      run(tensor_of<float, R, D>(t));
    }
  }
}

template <std::size_t R, class D>
void run_case(const std::string& name, const json& c) {
  const auto& o = c.at("options");
  const std::string reduction = o.at("reduction").get<std::string>();
  const auto how = reduction == "sum" ? knn::Reduction::sum : knn::Reduction::mean;
  const std::vector<double> weight = c.contains("weight") ? c.at("weight").get<std::vector<double>>() : std::vector<double>{};
  const auto ignore = o.at("ignore_index").get<std::int64_t>();
  if (c.at("loss_class") == "CrossEntropyLoss")
    run_case<R, D>(name, c,
                   knn::CrossEntropyLoss{.weight = weight, .ignore_index = ignore, .reduction = how,
                                         .label_smoothing = o.at("label_smoothing").get<double>()},
                   reduction == "none");
  else
    run_case<R, D>(name, c, knn::NLLLoss{.weight = weight, .ignore_index = ignore, .reduction = how},
                   reduction == "none");
}
}  // namespace

BOOST_AUTO_TEST_SUITE(nn)

BOOST_AUTO_TEST_CASE_TEMPLATE(k_dimensional_class_losses_match_pytorch, D, kiln::test::devices) {
  const json f = parity::load("losses_k_dim.json");
  int cases = 0;
  for (const auto& [name, c] : f.at("cases").items()) {
    BOOST_TEST_CONTEXT(name) {
      const auto rank = parity::shape(c.at("input")).size();
      if (rank == 4) run_case<4, D>(name, c);
      else if (rank == 3) run_case<3, D>(name, c);
      else BOOST_ERROR("a case of rank " << rank);
      ++cases;
    }
  }
  BOOST_TEST(cases == 10);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(k_dimensional_labels_of_another_shape_are_refused, D, kiln::test::devices) {
  Tensor<float, Shape<dyn, 4, dyn, dyn>, D> x(Extents<Shape<dyn, 4, dyn, dyn>>(2, 3, 5));
  x.fill(0.5f);
  Tensor<std::int64_t, Shape<dyn, dyn, dyn>, D> y(Extents<Shape<dyn, dyn, dyn>>(2, 5, 3));  // H and W swapped
  y.fill(1);
  const knn::CrossEntropyLoss ce;
  BOOST_TEST(kiln::test::throws_with<kiln::ShapeError>(
      [&] { (void)ce(x, y); }, "kiln::nn::CrossEntropyLoss: scores [2, 4, 3, 5] but labels [2, 5, 3]; expected the "
                               "scores' shape without dimension 1 (the classes)"));
  BOOST_TEST(kiln::test::throws_with<kiln::ShapeError>([&] { (void)knn::NLLLoss{}.backward(x, y); }, "NLLLoss::backward"));
  // A label outside [0, C): the CPU names it by its position in the labels (the GPU gives NaN there).
  if constexpr (std::is_same_v<D, kiln::Cpu>) {
    Tensor<std::int64_t, Shape<dyn, dyn, dyn>, D> bad(Extents<Shape<dyn, dyn, dyn>>(2, 3, 5));
    bad.fill(1);
    bad[1 * 15 + 2 * 5 + 3] = 4;  // [1, 2, 3]
    BOOST_TEST(kiln::test::throws_with<kiln::ValueError>(
        [&] { (void)ce(x, bad); }, "kiln::nn::CrossEntropyLoss: label 4 at [1, 2, 3] of labels [2, 3, 5] is outside [0, 4)"));
    bad[1 * 15 + 2 * 5 + 3] = -100;  // ignore_index counts
    BOOST_TEST(std::isfinite(static_cast<double>(ce(x, bad).item())));
    bad[4] = -1;  // [0, 0, 4]
    BOOST_TEST(kiln::test::throws_with<kiln::ValueError>([&] { (void)knn::NLLLoss{}.unreduced(x, bad); },
                                                         "NLLLoss::unreduced: label -1 at [0, 0, 4] of labels [2, 3, 5]"));
  }
}

BOOST_AUTO_TEST_SUITE_END()
