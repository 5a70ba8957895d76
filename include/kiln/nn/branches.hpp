/// Add and Concat: layers that run several branches on the same input and add their outputs
/// (a ResNet block with a projection shortcut) or join them along the channels (an Inception block,
/// a DenseNet layer), as a torch module's forward would write `f(x) + g(x)` or `torch.cat([...], 1)`.
#pragma once
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/config.hpp"
#include "kiln/core/counters.hpp"
#include "kiln/expr/executor.hpp"
#include "kiln/nn/detail/sum_epilogue.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/nn/sequential.hpp"
#include "kiln/ops/elementwise.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

/// Fails to compile, naming the branch's index, the branch, the shape and the shape the branch expects
/// (Expected: as a Sequential's layer_input_mismatch), when a branch of an Add or a Concat does not accept
/// the input of the block (-1 in a Shape is dyn).
template <std::size_t BranchIndex, class Branch, class Input, class Expected>
struct branch_input_mismatch {
  // >>> Stopped here? Branch number BranchIndex (from 0) of your Add<...> or Concat<...> does not accept
  //     the block's input; every branch reads the same input. The template arguments name the branch,
  //     that input and what the branch expects. <<<
  // >>> Stopped here? Branch number BranchIndex of your Add<...> or Concat<...> is not a kiln::nn layer
  //     (or one of your own without accepts<S> and output<S>). <<<
  static_assert(declares_shapes<Branch, Input>(),
                "kiln::nn::Add / Concat: a branch is not a kiln::nn layer with accepts<S> and output<S> (a "
                "Sequential<...>, a layer such as Linear<In, Out> or Identity, or one of your own: "
                "kiln/nn/layer.hpp); see the template arguments of kiln::nn::branch_input_mismatch<branch "
                "index, branch, input shape, ...>");
  static_assert(
      accepts_input<Branch, Input>(),
      "kiln::nn::Add / Concat: a branch does not accept the block's input (every branch reads the same "
      "x); see the template arguments of kiln::nn::branch_input_mismatch<branch index, branch, input "
      "shape, expected shape> (in a Shape, -1 means dyn; where no one shape is expected, a tag such as "
      "kiln::nn::any_shape_of_rank<4> names the rule)");
  static constexpr bool value = true;
};

/// Fails to compile, naming both shapes, when branch BranchIndex of an Add yields another shape than
/// branch 0: y = f0(x) + f1(x) + ... needs them equal (there is no broadcasting).
template <std::size_t BranchIndex, class First, class Other>
struct add_branches_must_agree {
  // >>> Stopped here? Every branch of Add<...> must yield the same shape. <<<
  static_assert(
      std::is_same_v<First, Other>,
      "kiln::nn::Add: every branch must yield the same shape (y = f0(x) + f1(x) + ...); see the "
      "template arguments of kiln::nn::add_branches_must_agree<branch index, branch 0's output, its "
      "output> (in a Shape, -1 means dyn), e.g. give the shortcut a Conv2d<In, Out, 1, Stride> that "
      "matches the other branch's channels and stride");
  static constexpr bool value = true;
};

namespace detail {
/// Whether A and B can be joined along dimension 1: the same rank (2 at least), the same extents but
/// dimension 1's, and every extent past the batch static.
template <class A, class B>
constexpr bool concat_fits() {
  if constexpr (A::rank != B::rank || A::rank < 2) {
    return false;
  } else {
    for (std::size_t d = 1; d < A::rank; ++d)
      if (A::extents[d] == dyn || B::extents[d] == dyn) return false;
    for (std::size_t d = 0; d < A::rank; ++d)
      if (d != 1 && A::extents[d] != B::extents[d]) return false;
    return true;
  }
}
}  // namespace detail

/// Fails to compile, naming both shapes, when branch BranchIndex of a Concat cannot be joined to branch
/// 0's output along dimension 1 (torch.cat([...], dim=1)).
template <std::size_t BranchIndex, class First, class Other>
struct concat_branches_must_agree {
  // >>> Stopped here? The branches of Concat<...> must yield the same rank and the same extents but the
  //     channels (dimension 1), all static past the batch. <<<
  static_assert(detail::concat_fits<First, Other>(),
                "kiln::nn::Concat: the branches' outputs must agree in every dimension but 1 (the channels), "
                "which are static; see the template arguments of kiln::nn::concat_branches_must_agree<branch "
                "index, branch 0's output, its output> (in a Shape, -1 means dyn)");
  static constexpr bool value = true;
};

namespace detail {
/// Branch I of a block on input S, checked: when it does not accept S (branch_input_mismatch says so) or
/// its own layers do not fit (their error is out), it stands for a layer that passes S through
/// (unchecked_layer), and the block reports no error of its own (failed<S>).
template <std::size_t I, class B, class S>
struct checked_branch {
  static constexpr bool ok = branch_input_mismatch<I, B, S, typename expected_input<B, S>::type>::value &&
                             declares_shapes<B, S>() && accepts_input<B, S>() && !failed_inside<B, S>();
  using layer = std::conditional_t<ok, B, unchecked_layer>;
  using output = typename layer::template output<S>;
};

/// Every output equals First (Add), checked only when every branch fits.
template <bool Check, class First, class... Os, std::size_t... I>
constexpr bool same_outputs(std::index_sequence<I...>) {
  if constexpr (Check)
    return (add_branches_must_agree<I, First, Os>::value && ...);
  else
    return true;
}
/// Every output joins First along dimension 1 (Concat), checked only when every branch fits.
template <bool Check, class First, class... Os, std::size_t... I>
constexpr bool joinable_outputs(std::index_sequence<I...>) {
  if constexpr (Check)
    return (concat_branches_must_agree<I, First, Os>::value && ...);
  else
    return true;
}

/// The branches' layers (checked) and output shapes, for input S.
template <class S, class Index, class... Bs>
struct branch_set;
template <class S, std::size_t... I, class... Bs>
struct branch_set<S, std::index_sequence<I...>, Bs...> {
  /// Every branch accepts S and fits inside (else an error has said which does not).
  static constexpr bool accepted = (checked_branch<I, Bs, S>::ok && ...);
  using layers = type_list<typename checked_branch<I, Bs, S>::layer...>;
  using outputs = type_list<typename checked_branch<I, Bs, S>::output...>;
  using first = typename type_at<0, outputs>::type;
  /// Every branch's output equals branch 0's (Add; true while a branch does not fit).
  static constexpr bool same = same_outputs<accepted, first, typename checked_branch<I, Bs, S>::output...>(
      std::index_sequence<I...>{});
  /// Every branch's output joins branch 0's along dimension 1 (Concat; true while a branch does not fit).
  static constexpr bool joinable =
      joinable_outputs<accepted, first, typename checked_branch<I, Bs, S>::output...>(
          std::index_sequence<I...>{});
};
template <class S, class... Bs>
using branches_of = branch_set<S, std::index_sequence_for<Bs...>, Bs...>;

/// S with extent Dim replaced by V.
template <class S, std::size_t Dim, index_t V, class Index = std::make_index_sequence<S::rank>>
struct with_extent;
template <class S, std::size_t Dim, index_t V, std::size_t... I>
struct with_extent<S, Dim, V, std::index_sequence<I...>> {
  using type = Shape<(I == Dim ? V : S::extents[I])...>;
};

/// First with dimension 1 the sum of the outputs' (Fits), else First itself.
template <bool Fits, class First, class... Os>
struct joined {
  using type = First;
};
template <class First, class... Os>
struct joined<true, First, Os...> {
  using type = typename with_extent<First, 1, (index_t{0} + ... + Os::extents[1])>::type;
};
/// The concatenation of the outputs along dimension 1 (branch 0's output while they do not fit, so that
/// the only error is the one that says why).
template <class Set, class Outputs = typename Set::outputs>
struct concat_output;
template <class Set, class... Os>
struct concat_output<Set, type_list<Os...>> {
  using first = typename Set::first;
  using type = typename joined<Set::accepted && Set::joinable && (concat_fits<first, Os>() && ...), first,
                               Os...>::type;
};

template <class P, class S, class Layers>
struct branch_modules;
template <class P, class S, class... Ls>
struct branch_modules<P, S, type_list<Ls...>> {
  using type = std::tuple<typename Ls::template module<S, P>...>;
};

/// Copies one branch's block of channels into the joined tensor (Gather = false) or back out of it
/// (Gather = true): element i of the branch's [N, C_b, inner] is element (n, offset + c, inner) of the
/// joined [N, C, inner], block = C_b inner, stride = C inner, offset in elements.
template <class T, bool Gather>
struct ChannelBlockCopy {
  const T* from;
  T* to;
  index_t block, stride, offset;
  KILN_HOST_DEVICE void operator()(index_t i) const {
    const index_t n = i / block, j = n * stride + offset + (i - n * block);
    if constexpr (Gather)
      to[i] = from[j];
    else
      to[j] = from[i];
  }
  Traffic traffic(index_t n) const { return {2 * kiln::detail::bytes_of<T>(n), 0}; }
};

/// What Add's and Concat's modules share: the branches' modules, their parameters and buffers one branch
/// after another in the arenas, named "<branch index>.<name>" (a torch module holding its branches as
/// an nn.ModuleList: under the block's index in a Sequential, "3.1.0.weight").
template <class S, class P, class... Branches>
class branch_block {
 protected:
  using set = branches_of<S, Branches...>;
  using tuple_type = typename branch_modules<P, S, typename set::layers>::type;
  static constexpr std::size_t n = sizeof...(Branches);

 public:
  using T = typename P::precision::storage;
  using M = typename P::precision::master;
  using D = typename P::device;
  using input_shape = S;
  static constexpr index_t parameter_count = total_parameters<tuple_type>::value;
  static constexpr index_t buffer_count = total_buffers<tuple_type>::value;

  void bind(M* params, M* grads, T* work, int device) {
    bind_in_order(branches_, params, grads, work, device);
  }
  void reset_parameters(Generator& g) { reset_in_order(branches_, g); }
  void bind_buffers(M* buffers, int device) { bind_buffers_in_order(branches_, buffers, device); }
  void init_buffers(M* host) const { init_buffers_in_order(branches_, host); }
  std::vector<ParameterInfo> parameters() const { return named_in_order<ParameterInfo>(branches_); }
  std::vector<BufferInfo> buffers() const { return named_in_order<BufferInfo>(branches_); }
  /// Branch I's module (a Sequential branch's layers: branch<I>().template layer<J>()).
  template <std::size_t I>
  auto& branch() {
    return std::get<I>(branches_);
  }

 protected:
  /// Every branch's output, in branch order.
  auto forward_all(const Tensor<T, S, D>& x, Context ctx) {
    return std::apply([&](auto&... m) { return std::tuple{m.forward(x, ctx)...}; }, branches_);
  }
  /// Every branch's backward for its own output gradient dys[i], in branch order (the parameter
  /// gradients accumulate either way); dx, the sum of their input gradients in one pass (empty when
  /// !input_grad).
  template <class Dys, std::size_t... I>
  Tensor<T, S, D> backward_sum(const Dys& dys, bool input_grad, std::index_sequence<I...> = {}) {
    if constexpr (sizeof...(I) < n) {
      return backward_sum(dys, input_grad, std::index_sequence_for<Branches...>{});
    } else {
      auto dxs = std::tuple{backward_of(std::get<I>(branches_), std::get<I>(dys), input_grad)...};
      if constexpr (n == 1) {
        return std::get<0>(dxs);
      } else {
        if (!input_grad) return Tensor<T, S, D>();
        Tensor<T, S, D> dx(std::get<0>(dxs).extents(), std::get<0>(dys).device_index());
        dx = (... + std::get<I>(dxs));
        return dx;
      }
    }
  }
  std::string branch_names() const {
    std::string names;
    std::apply([&](const auto&... m) { ((names += (names.empty() ? "" : ", ") + m.name()), ...); },
               branches_);
    return names;
  }

  tuple_type branches_;
};
}  // namespace detail

/// y = f0(x) + f1(x) + ...: every branch (a layer, usually a Sequential<...>) reads x, and their outputs,
/// all of one shape, are added in one pass (fp32 arithmetic for 16-bit storage, rounded once).
/// Backward: each branch gets dy; dx is the sum of theirs.
/// Parameters: branch i's as "<i>.<name>" ("1.0.weight" for the first layer of a Sequential branch 1).
/// Example: a ResNet block that halves the resolution, its shortcut a strided 1x1 convolution:
///   Add<Sequential<Conv2d<16, 32, 3, 2, 1, 1, 1, false>, BatchNorm2d<32>, ReLU,
///                  Conv2d<32, 32, 3, 1, 1, 1, 1, false>, BatchNorm2d<32>>,
///       Sequential<Conv2d<16, 32, 1, 2, 0, 1, 1, false>, BatchNorm2d<32>>>, ReLU
/// (`Add<Identity, Sequential<...>>` is Residual<...> with the branch named "1.<index>").
template <class... Branches>
struct Add {
  static_assert(sizeof...(Branches) >= 1, "kiln::nn::Add: give at least one branch");
  template <class S>
  static constexpr bool accepts = true;  // each branch checks the input, with its index
  /// Whether a branch did not fit (its error is out): nothing past the block is inferred.
  template <class S>
  static constexpr bool failed = !detail::branches_of<S, Branches...>::accepted;
  template <class S>
  using output = std::conditional_t<detail::branches_of<S, Branches...>::same,
                                    typename detail::branches_of<S, Branches...>::first,
                                    typename detail::branches_of<S, Branches...>::first>;

  template <class S, class P>
  class module : public detail::branch_block<S, P, Branches...> {
    using base = detail::branch_block<S, P, Branches...>;

   public:
    using typename base::D;
    using typename base::T;
    using output_shape = output<S>;

    std::string name() const { return "Add(" + this->branch_names() + ")"; }

    /// y = Σ f_i(x): the branches, then one pass for the sum.
    Tensor<T, output_shape, D> forward(const Tensor<T, S, D>& x, Context ctx) {
      auto outs = this->forward_all(x, ctx);
      if constexpr (sizeof...(Branches) == 1) {
        return std::get<0>(outs);
      } else {
        Tensor<T, output_shape, D> y(std::get<0>(outs).extents(), x.device_index());
        std::apply([&](const auto&... o) { y = (... + o); }, outs);
        return y;
      }
    }
    /// dx = Σ f_i'(x)ᵀ dy (the parameter gradients of every branch accumulate either way).
    Tensor<T, S, D> backward(const Tensor<T, output_shape, D>& dy, bool input_grad = true) {
      return this->backward_sum(repeat(dy, std::index_sequence_for<Branches...>{}), input_grad);
    }

    /// y = E(Σ f_i(x)): in a Sequential the activation after the block (ResNet's ReLU after the sum)
    /// runs in the pass that adds the branches (nn/detail/sum_epilogue.hpp), its own pass saved.
    static constexpr bool fuses_epilogue = true;
    template <class E>
    Tensor<T, output_shape, D> forward_fused(const Tensor<T, S, D>& x, Context ctx) {
      auto outs = this->forward_all(x, ctx);
      return std::apply(
          [&](const auto&... o) { return detail::sum_epilogue<E>(activation_, ctx.grad, o...); }, outs);
    }
    /// E's derivative in one pass (from the value forward_fused<E> kept), then backward().
    template <class E>
    Tensor<T, S, D> backward_fused(const Tensor<T, output_shape, D>& dy, bool input_grad = true) {
      return backward(detail::epilogue_backward<E>(dy, activation_, "Add"), input_grad);
    }

   private:
    template <std::size_t... I>
    static auto repeat(const Tensor<T, output_shape, D>& dy, std::index_sequence<I...>) {
      return std::tuple<decltype((void)I, dy)...>{((void)I, dy)...};
    }

    Tensor<T, output_shape, D> activation_;  // what a fused activation's derivative reads (forward_fused)
  };
};

/// y = torch.cat([f0(x), f1(x), ...], dim=1): every branch reads x; their outputs agree in every
/// dimension but 1 (the channels, or a [N, F] tensor's features) and are joined along it, branch 0's
/// channels first. Backward: each branch gets its block of dy; dx is the sum of theirs.
/// Parameters: branch i's as "<i>.<name>".
/// Example: an Inception-like block on [N, 16, H, W] -> [N, 24, H, W]:
///   Concat<Conv2d<16, 8, 1>, Sequential<Conv2d<16, 8, 1>, ReLU, Conv2d<8, 8, 3, 1, 1>>,
///          Sequential<MaxPool2d<3, 1, 1>, Conv2d<16, 8, 1>>>
/// and a DenseNet layer, x joined to what it computes: Concat<Identity, Sequential<...>>.
template <class... Branches>
struct Concat {
  static_assert(sizeof...(Branches) >= 1, "kiln::nn::Concat: give at least one branch");
  template <class S>
  static constexpr bool accepts = true;  // each branch checks the input, with its index
  /// Whether a branch did not fit (its error is out): nothing past the block is inferred.
  template <class S>
  static constexpr bool failed = !detail::branches_of<S, Branches...>::accepted;
  template <class S>
  using output = typename detail::concat_output<detail::branches_of<S, Branches...>>::type;

  template <class S, class P>
  class module : public detail::branch_block<S, P, Branches...> {
    using base = detail::branch_block<S, P, Branches...>;
    using outputs = typename base::set::outputs;
    template <std::size_t I>
    using output_at = typename detail::type_at<I, outputs>::type;
    template <std::size_t I>
    static constexpr index_t inner = [] {  // the elements of one channel of a sample
      index_t v = 1;
      for (std::size_t d = 2; d < output_at<I>::rank; ++d) v *= output_at<I>::extents[d];
      return v;
    }();
    /// Where branch I's channels start in the joined tensor.
    template <std::size_t... J>
    static constexpr index_t channels_before(std::index_sequence<J...>) {
      return (index_t{0} + ... + output_at<J>::extents[1]);
    }
    template <std::size_t I>
    static constexpr index_t channel_offset = channels_before(std::make_index_sequence<I>{});

   public:
    using typename base::D;
    using typename base::T;
    using output_shape = output<S>;

    std::string name() const { return "Concat(" + this->branch_names() + ", dim=1)"; }

    /// The branches, then one copy of each output into its channels of y.
    Tensor<T, output_shape, D> forward(const Tensor<T, S, D>& x, Context ctx) {
      auto outs = this->forward_all(x, ctx);
      rows_ = std::get<0>(outs).size(0);  // every branch's: a layer keeps the rows
      Extents<output_shape> e = {};
      e[0] = rows_;
      Tensor<T, output_shape, D> y(e, x.device_index());
      join(outs, y, std::index_sequence_for<Branches...>{});
      return y;
    }
    /// dy's block of channels to each branch; dx is the sum of their input gradients.
    Tensor<T, S, D> backward(const Tensor<T, output_shape, D>& dy, bool input_grad = true) {
      detail::check_backward_rows("Concat", dy.size(0), rows_);
      auto dys = blocks(dy, std::index_sequence_for<Branches...>{});
      return this->backward_sum(dys, input_grad);
    }

   private:
    template <std::size_t I, bool Gather>
    static void copy(const T* from, T* to, index_t count) {
      constexpr index_t block = output_at<I>::extents[1] * inner<I>;
      constexpr index_t stride = output_shape::extents[1] * inner<I>;
      kiln::detail::executor<D>::for_each(
          count, detail::ChannelBlockCopy<T, Gather>{from, to, block, stride, channel_offset<I> * inner<I>});
    }
    template <class Outs, std::size_t... I>
    static void join(const Outs& outs, Tensor<T, output_shape, D>& y, std::index_sequence<I...>) {
      (copy<I, false>(std::get<I>(outs).data(), y.data(), std::get<I>(outs).numel()), ...);
    }
    template <std::size_t... I>
    static auto blocks(const Tensor<T, output_shape, D>& dy, std::index_sequence<I...>) {
      return std::tuple{block<I>(dy)...};
    }
    /// Branch I's block of the joined dy.
    template <std::size_t I>
    static Tensor<T, output_at<I>, D> block(const Tensor<T, output_shape, D>& dy) {
      Extents<output_at<I>> e = {};
      e[0] = dy.size(0);
      Tensor<T, output_at<I>, D> d(e, dy.device_index());
      copy<I, true>(dy.data(), d.data(), d.numel());
      return d;
    }

    index_t rows_ = 0;
  };
};

namespace detail {
/// The one shape every branch yields (each a Shape or void), else void.
template <class First, class... Others>
struct quiet_agreement {
  using type = std::conditional_t<(std::is_same_v<First, Others> && ...), First, void>;
};
/// An Add yields what each branch yields when they agree; nothing is inferred past an Add or a Concat
/// that failed, or past a Concat without its checks (the shapes it joins).
template <class... Branches>
struct holds_layers<Add<Branches...>> : std::true_type {
  template <class In>
  using quiet = typename quiet_agreement<typename quiet_output<In, Branches>::type...>::type;
  template <class In>
  using after_failure = void;
};
template <class... Branches>
struct holds_layers<Concat<Branches...>> : std::true_type {
  template <class In>
  using quiet = void;
  template <class In>
  using after_failure = void;
};
}  // namespace detail

}  // namespace kiln::nn
