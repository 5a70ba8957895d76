/// Sequential: a flat pack of layers applied in order; shapes are inferred, and checked, at compile time.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <iomanip>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/fusion.hpp"
#include "kiln/core/type_list.hpp"
#include "kiln/nn/epilogue.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

namespace detail {
template <template <class, class> class>
struct template_exists : std::true_type {};
template <class Layer, class = void>
struct has_module : std::false_type {};
// (by its member template `module`, named without arguments: nvcc's front end rewrote a user's
// `L::accepts<S>` without its template argument once a requires-expression or a trait had named it)
template <class Layer>
struct has_module<Layer, std::void_t<template_exists<Layer::template module>>> : std::true_type {};
}  // namespace detail

/// Whether Layer is a kiln::nn layer at all: it has the member template `module<S, P>` every layer has
/// (kiln/nn/layer.hpp; its `accepts<S>` is checked next).
template <class Layer, class Input>
constexpr bool is_layer() {
  return detail::has_module<Layer>::value;
}

namespace detail {
template <template <class> class>
struct alias_template_exists : std::true_type {};
template <class Layer, class = void>
struct has_output : std::false_type {};
template <class Layer>
struct has_output<Layer, std::void_t<alias_template_exists<Layer::template output>>> : std::true_type {};
#if defined(__CUDACC__)
// nvcc's front end writes a later `L::accepts<S>` back without its template argument once a
// requires-expression has named it (tests/unit/nn/test_model.cpp failed so): there only output<S> is
// checked, and a layer without accepts<S> gets the compiler's own errors.
template <class Layer, class Input>
concept has_accepts = true;
#else
template <class Layer, class Input>
concept has_accepts = requires { Layer::template accepts<Input>; };
#endif
}  // namespace detail

/// Whether Layer, a layer, also declares the accepts<S> and output<S> every layer has (a layer of one's
/// own may have been given its module<S, P> alone).
template <class Layer, class Input>
constexpr bool declares_shapes() {
  if constexpr (is_layer<Layer, Input>())
    return detail::has_accepts<Layer, Input> && detail::has_output<Layer>::value;
  else
    return false;
}

/// Whether layer Layer accepts Input; true for what is no layer or declares no shapes (is_layer's or
/// declares_shapes' error is the one then).
template <class Layer, class Input>
constexpr bool accepts_input() {
  if constexpr (declares_shapes<Layer, Input>())
    return Layer::template accepts<Input>;
  else
    return true;
}

namespace detail {
/// Layer::expects<Input>, or see_the_layers_accepts for a type without it (detected, as has_module, by
/// the member template named without arguments).
template <class Layer, class Input, class = void>
struct expects_of {
  using type = see_the_layers_accepts;
};
template <class Layer, class Input>
struct expects_of<Layer, Input, std::void_t<alias_template_exists<Layer::template expects>>> {
  using type = typename Layer::template expects<Input>;
};
/// What Layer expects where it is given Input, for the error that names both: Input itself when it is a
/// layer that accepts it (nothing more is instantiated then), else its expects<Input> (kiln/nn/layer.hpp).
template <class Layer, class Input,
          bool Accepted = is_layer<Layer, Input>() &&
                          (!declares_shapes<Layer, Input>() || accepts_input<Layer, Input>())>
struct expected_input {
  using type = Input;
};
template <class Layer, class Input>
struct expected_input<Layer, Input, false> : expects_of<Layer, Input> {};
}  // namespace detail

/// Fails to compile, naming the layer's index, the layer, the shape it was given and the shape it
/// expects there (Expected: detail::expected_input's), when layer number Index of a Sequential does not
/// accept the shape the previous layers produce (-1 in a Shape is dyn), or is no layer. `ok`: it is a
/// layer and accepts the shape.
template <std::size_t Index, class Layer, class Input, class Expected>
struct layer_input_mismatch {
  // >>> Stopped here? The type at Index (from 0) of your Sequential is not a kiln::nn layer. <<<
  static_assert(is_layer<Layer, Input>(),
                "kiln::nn::Sequential: the type at this index is not a kiln::nn layer (it has no module<S, P>; "
                "a Model's network that is no Sequential is checked as layer 0); "
                "see the template arguments of kiln::nn::layer_input_mismatch<index, type, input shape, ...>. A "
                "layer is a kiln::nn type such as Linear<In, Out> or ReLU, or one of your own with accepts<S>, "
                "output<S> and module<S, P> (kiln/nn/layer.hpp)");
  // >>> Stopped here? The layer at Index (from 0) is one of your own with module<S, P> but without
  //     accepts<S> or output<S>. <<<
  static_assert(!is_layer<Layer, Input>() || declares_shapes<Layer, Input>(),
                "kiln::nn::Sequential: the layer at this index has a module<S, P> but no accepts<S> or no "
                "output<S>; see the template arguments of kiln::nn::layer_input_mismatch<index, layer, input "
                "shape, ...>. A layer of one's own declares both beside its module: template <class S> static "
                "constexpr bool accepts = ...; and template <class S> using output = ...; (docs/models.md, "
                "\"Layers of your own\"; kiln/nn/layer.hpp)");
  static constexpr bool accepted = accepts_input<Layer, Input>();
  // >>> Stopped here? Layer number Index (from 0) of your Sequential does not accept the shape the layers
  //     before it produce. The template arguments above name the index, the layer, that shape and the
  //     shape the layer expects there. <<<
  static_assert(accepted,
                "kiln::nn::Sequential: shape mismatch: the layer at this index does not accept the shape the "
                "layers before it produce; see the template arguments of kiln::nn::layer_input_mismatch<index, "
                "layer, input shape, expected shape> (in a Shape, -1 means dyn; where no one shape is expected, "
                "a tag such as kiln::nn::any_shape_of_rank<4> names the rule). Make the layer's parameters fit "
                "the input shape, or the layers before it yield the expected one: a Linear's In the features (a "
                "Linear after convolutions needs a Flatten before it), a Conv2d's, BatchNorm2d's or GroupNorm's "
                "channels dimension 1 of [N, C, H, W], a pooling window at most H and W; convolutions and 2-d "
                "pooling take [N, C, H, W] with static H and W. A Model whose network is one bare layer checks it "
                "the same way, as layer 0 given the model's input shape");
  static constexpr bool ok = declares_shapes<Layer, Input>() && accepted;
};

namespace detail {
/// Stands in for a layer from the first mismatch on, so that the only error a mismatch produces is
/// layer_input_mismatch's static_assert (no cascade from checking the rest). Out = void (unchecked_layer):
/// passes its input through. Out a shape: the mismatched layer when the rest of the network still yields
/// a shape from what that layer expected (Out): the network's output is then the one its author meant,
/// so that a loss on it adds no second error (`mse(model(x), target)` after a Linear given the wrong
/// features). Never run: a program holding it does not compile.
template <class Out = void>
struct unchecked_layer_to {
  template <class S>
  static constexpr bool accepts = true;
  template <class S>
  using output = std::conditional_t<std::is_void_v<Out>, S, Out>;
  template <class S, class P>
  struct module {
    using T = typename P::precision::storage;
    using M = typename P::precision::master;
    using D = typename P::device;
    using input_shape = S;
    using output_shape = output<S>;
    static constexpr index_t parameter_count = 0;
    void bind(M*, M*, T*, int) {}
    void reset_parameters(Generator&) {}
    std::vector<ParameterInfo> parameters() const { return {}; }
    std::string name() const {
      return std::is_void_v<Out> ? "(not checked: shape mismatch before it)"
                                 : "(not checked: shape mismatch)";
    }
    Tensor<T, output_shape, D> forward(const Tensor<T, S, D>& x, Context) {
      if constexpr (std::is_void_v<Out>) return x;
      else return {};
    }
    Tensor<T, S, D> backward(const Tensor<T, output_shape, D>& dy) {
      if constexpr (std::is_void_v<Out>) return dy;
      else return {};
    }
  };
};
using unchecked_layer = unchecked_layer_to<>;

/// How a layer holding layers of its own (Sequential, Residual, Add, Concat) is followed without an
/// error: `quiet<In>`, its output from In where every layer inside accepts what it is given, and
/// `after_failure<In>`, its output where one inside did not (its error is out); void where there is
/// none to go on from. A layer of another kind is followed by its accepts / output (quiet_output).
template <class L>
struct holds_layers : std::false_type {};

/// The shape layers Ls yield from In where each accepts what it is given (checked without an error),
/// else void.
template <class In, class... Ls>
struct quiet_output {
  using type = In;
};
template <class In, class L, class... Rest>
struct quiet_output<In, L, Rest...> {
  static auto pick() {
    if constexpr (std::is_void_v<In>)
      return std::type_identity<void>{};
    else if constexpr (holds_layers<L>::value)
      return quiet_output<typename holds_layers<L>::template quiet<In>, Rest...>{};
    else if constexpr (!declares_shapes<L, In>())
      return std::type_identity<void>{};
    else if constexpr (!L::template accepts<In>)
      return std::type_identity<void>{};
    else
      return quiet_output<typename L::template output<In>, Rest...>{};
  }
  using type = typename decltype(pick())::type;
};

/// What the network yields past layer L, which did not accept In (or failed inside, its error out),
/// going on from what L expected (Expected, a Shape: a Linear's features, a Conv2d's channels) or from
/// what a block yields after its own failure; void where nothing can be inferred without a guess.
template <class In, class L, class Expected, class... Rest>
struct recovered_output {
  static auto pick() {
    if constexpr (declares_shapes<L, In>() && accepts_input<L, In>()) {  // the mismatch is inside L
      if constexpr (holds_layers<L>::value)
        return quiet_output<typename holds_layers<L>::template after_failure<In>, Rest...>{};
      else
        return std::type_identity<void>{};
    } else if constexpr (kiln::shape<Expected> && !holds_layers<L>::value) {
      return quiet_output<Expected, L, Rest...>{};
    } else {
      return std::type_identity<void>{};
    }
  }
  using type = typename decltype(pick())::type;
};
template <class X, class>
struct first_of {
  using type = X;
};
template <class X, class List>
struct prepend;
template <class X, class... Ts>
struct prepend<X, type_list<Ts...>> {
  using type = type_list<X, Ts...>;
};

/// Whether layer L, given In, has already stopped at an error of its own inside (a Sequential, Residual,
/// Add or Concat whose layers do not fit: L::failed<In>). What holds it then infers nothing past it,
/// without an error of its own: one error, not a cascade.
template <class L, class In>
constexpr bool failed_inside() {
  if constexpr (!declares_shapes<L, In>())
    return true;  // (not a layer, or no shapes: layer_input_mismatch says so, nothing is inferred past it)
  else if constexpr (requires { L::template failed<In>; })
    return L::template failed<In>;
  else
    return false;
}

/// The input shape of every layer (`inputs`), the layers (`layers`) and the output shape, checked in
/// order; from the first mismatch on nothing more is checked (one error, not a cascade), and `failed`
/// says there was one. The output is then what the layers after it yield from what the mismatched
/// layer expected, where they accept that without an error (`recovered`: a loss on the model's output
/// adds no second error), else the mismatched layer's input.
template <std::size_t I, class In, class... Ls>
struct infer;
template <std::size_t I, class In>
struct infer<I, In> {
  using inputs = type_list<>;
  using layers = type_list<>;
  using output = In;
  static constexpr bool failed = false;
  using recovered = void;
};
template <bool Ok, std::size_t I, class In, class L, class... Rest>
struct infer_step {
  using rest = infer<I + 1, typename L::template output<In>, Rest...>;
  using inputs = typename prepend<In, typename rest::inputs>::type;
  using layers = typename prepend<L, typename rest::layers>::type;
  using output = typename rest::output;
  static constexpr bool failed = rest::failed;
  using recovered = typename rest::recovered;
};
template <std::size_t I, class In, class L, class... Rest>
struct infer_step<false, I, In, L, Rest...> {
  using recovered = typename recovered_output<In, L, typename expected_input<L, In>::type, Rest...>::type;
  using output = std::conditional_t<std::is_void_v<recovered>, In, recovered>;
  using inputs = type_list<In, typename first_of<output, Rest>::type...>;
  using stand_in = std::conditional_t<std::is_void_v<recovered>, unchecked_layer, unchecked_layer_to<output>>;
  using layers = type_list<stand_in, typename first_of<unchecked_layer, Rest>::type...>;
  static constexpr bool failed = true;
};
template <std::size_t I, class In, class L, class... Rest>
struct infer<I, In, L, Rest...>
    : infer_step<layer_input_mismatch<I, L, In, typename expected_input<L, In>::type>::ok &&
                     !failed_inside<L, In>(),
                 I, In, L, Rest...> {};

template <std::size_t I, class List>
struct type_at;
template <std::size_t I, class X, class... Ts>
struct type_at<I, type_list<X, Ts...>> : type_at<I - 1, type_list<Ts...>> {};
template <class X, class... Ts>
struct type_at<0, type_list<X, Ts...>> {
  using type = X;
};

template <class P, class Inputs, class Layers>
struct modules;
template <class P, class... Ins, class... Ls>
struct modules<P, type_list<Ins...>, type_list<Ls...>> {
  using type = std::tuple<typename Ls::template module<Ins, P>...>;
};

template <class Tuple>
struct total_buffers;
template <class... Ms>
struct total_buffers<std::tuple<Ms...>> {
  static constexpr index_t value = (index_t{0} + ... + buffer_count_of<Ms>());
};

template <class Tuple>
struct total_parameters;
template <class... Ms>
struct total_parameters<std::tuple<Ms...>> {
  static constexpr index_t value = (index_t{0} + ... + Ms::parameter_count);
};

/// Modules laid one after another in a model's arenas (a Sequential's layers, an Add's branches): each
/// bound to its slice of the parameters, gradients, working copy and buffers in order, initialised in
/// order, and its parameters and buffers named "<position>.<name>" at their offsets.
template <class Tuple, class M, class T>
void bind_in_order(Tuple& modules, M* params, M* grads, T* work, int device) {
  index_t off = 0;
  std::apply(
      [&](auto&... m) {
        ((m.bind(params + off, grads + off, work + off, device),
          off += std::remove_cvref_t<decltype(m)>::parameter_count),
         ...);
      },
      modules);
}
template <class Tuple>
void reset_in_order(Tuple& modules, Generator& g) {
  std::apply([&](auto&... m) { (m.reset_parameters(g), ...); }, modules);
}
template <class Tuple, class M>
void bind_buffers_in_order(Tuple& modules, M* buffers, int device) {
  index_t off = 0;
  std::apply(
      [&](auto&... m) {
        ((bind_buffers_of(m, buffers + off, device),
          off += buffer_count_of<std::remove_cvref_t<decltype(m)>>()),
         ...);
      },
      modules);
}
template <class Tuple, class M>
void init_buffers_in_order(const Tuple& modules, M* host) {
  index_t off = 0;
  std::apply(
      [&](const auto&... m) {
        ((init_buffers_of(m, host + off), off += buffer_count_of<std::remove_cvref_t<decltype(m)>>()), ...);
      },
      modules);
}
/// Info is ParameterInfo (m.parameters()) or BufferInfo (buffers_of(m)).
template <class Info, class Tuple>
std::vector<Info> named_in_order(const Tuple& modules) {
  std::vector<Info> all;
  index_t off = 0;
  std::size_t i = 0;
  const auto add = [&](const auto& m) {
    using Mod = std::remove_cvref_t<decltype(m)>;
    std::vector<Info> own;
    if constexpr (std::is_same_v<Info, ParameterInfo>)
      own = m.parameters();
    else
      own = buffers_of(m);
    for (auto& x : own) {
      x.name = std::to_string(i) + "." + x.name;
      x.offset += off;
      all.push_back(std::move(x));
    }
    if constexpr (std::is_same_v<Info, ParameterInfo>)
      off += Mod::parameter_count;
    else
      off += buffer_count_of<Mod>();
    ++i;
  };
  std::apply([&](const auto&... m) { (add(m), ...); }, modules);
  return all;
}

/// "[1, 6, 28, 28]" with the batch (a dyn first extent) shown as given; another dyn extent, known only
/// from the input, as "?".
template <class S>
std::string shape_string(index_t batch) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < S::rank; ++i) {
    os << (i ? ", " : "");
    if (S::extents[i] != dyn)
      os << S::extents[i];
    else if (i == 0)
      os << batch;
    else
      os << '?';
  }
  os << ']';
  return os.str();
}

/// A row of the summary: index ("3", or "1.0" for layer 0 of a nested Sequential at 1), layer, output
/// shape, parameters.
using SummaryRow = std::array<std::string, 4>;

/// A table like torchinfo's: index, layer, output shape, parameters (one row each; a nested Sequential's
/// layers under it, indented); totals and bytes. The layer column is as wide as its longest name (52 at
/// least), so the columns line up. In and Out: the network's input and output shapes.
template <class M, class In, class Out>
std::string summary_table(const std::vector<SummaryRow>& rows, index_t batch, index_t parameter_count,
                          index_t buffer_count) {
  std::size_t index_width = 4, width = 52;
  for (const auto& r : rows) index_width = std::max(index_width, r[0].size() + 1), width = std::max(width, r[1].size());
  std::ostringstream os;
  const auto row = [&](const SummaryRow& r) {
    os << std::left << std::setw(static_cast<int>(index_width)) << r[0] << ' ' << std::setw(static_cast<int>(width))
       << r[1] << ' ' << std::setw(22) << r[2] << ' ' << std::right << std::setw(12) << r[3] << '\n';
  };
  const std::string rule(index_width + width + 37, '-');  // index + 1 + width + 1 + 22 + 1 + 12
  row({"#", "layer", "output shape", "parameters"});
  os << rule << '\n';
  for (const auto& r : rows) row(r);
  os << rule << '\n';
  os << "total parameters: " << parameter_count << " (" << parameter_count * static_cast<index_t>(sizeof(M))
     << " bytes as " << dtype_name<M>() << ")\n";
  if (buffer_count > 0)
    os << "buffers: " << buffer_count << " (" << buffer_count * static_cast<index_t>(sizeof(M)) << " bytes as "
       << dtype_name<M>() << "; running statistics, not trained)\n";
  os << "input " << shape_string<In>(batch) << " -> output " << shape_string<Out>(batch) << '\n';
  return os.str();
}
}  // namespace detail

/// Layers applied in order: `Sequential<Linear<13, 16>, ReLU, Linear<16, 32>, ReLU, Linear<32, 1>>`.
/// Shapes: inferred from the input shape given to the model (`Shape<dyn, 13>`). A layer that does not
/// accept what the previous ones produce is a compile error naming its index and both shapes.
/// Parameters are named like PyTorch's nn.Sequential state_dict: "<index>.<name>" ("0.weight").
template <class... Layers>
struct Sequential {
  static_assert(sizeof...(Layers) > 0, "kiln::nn::Sequential: give at least one layer");
  /// The number of layers (torch's len(model); what Model::freeze counts).
  static constexpr std::size_t layer_count = sizeof...(Layers);

  template <class S>
  static constexpr bool accepts = true;  // each layer checks its own input, with its index
  template <class S>
  using output = typename detail::infer<0, S, Layers...>::output;
  /// Whether a layer did not fit (its error is out): a Sequential holding this one stops there too.
  template <class S>
  static constexpr bool failed = detail::infer<0, S, Layers...>::failed;

  template <class S, class P>
  class module {
    using info = detail::infer<0, S, Layers...>;
    using tuple_type = typename detail::modules<P, typename info::inputs, typename info::layers>::type;
    static constexpr std::size_t n = sizeof...(Layers);

   public:
    using T = typename P::precision::storage;
    using M = typename P::precision::master;
    using D = typename P::device;
    using input_shape = S;
    using output_shape = typename info::output;
    static constexpr index_t parameter_count = detail::total_parameters<tuple_type>::value;

    void bind(M* params, M* grads, T* work, int device) {
      detail::bind_in_order(layers_, params, grads, work, device);
    }
    void reset_parameters(Generator& g) { detail::reset_in_order(layers_, g); }
    /// The layers' buffers (BatchNorm's running statistics), one after another in their order.
    static constexpr index_t buffer_count = detail::total_buffers<tuple_type>::value;
    void bind_buffers(M* buffers, int device) { detail::bind_buffers_in_order(layers_, buffers, device); }
    void init_buffers(M* host) const { detail::init_buffers_in_order(layers_, host); }
    /// Every buffer, named "<layer index>.<name>", with its offset in the model's buffer arena.
    std::vector<BufferInfo> buffers() const { return detail::named_in_order<BufferInfo>(layers_); }
    /// Every parameter, named "<layer index>.<name>", with its offset in the model's arena.
    std::vector<ParameterInfo> parameters() const { return detail::named_in_order<ParameterInfo>(layers_); }
    std::string name() const { return "Sequential"; }

    /// `keep_from`: the layers before it keep nothing for backward (ctx.grad off for them): the frozen
    /// layers (Model::freeze), which backward does not reach.
    Tensor<T, output_shape, D> forward(const Tensor<T, S, D>& x, Context ctx, std::size_t keep_from = 0) {
      keep_from_ = keep_from;
      return forward_from<0>(x, ctx);
    }
    /// Gradients of every layer from dL/dy; returns dL/dx, or an empty tensor when input_grad is false
    /// (the first layer then skips that product). `ready`, if given, is told each layer's arena offset
    /// once that layer's gradients are done.
    /// `first`: the first layer to go back through (Model::freeze: the layers before it are frozen);
    /// the layers before it are not run, their gradients not written, and dL/dx is not computed.
    Tensor<T, S, D> backward(const Tensor<T, output_shape, D>& dy, bool input_grad = true,
                             const GradientsReady* ready = nullptr, std::size_t first = 0) {
      first_ = input_grad ? 0 : first;
      return backward_from<n - 1>(dy, input_grad, ready);
    }
    /// Where layer I's parameters start in the arena.
    template <std::size_t I>
    static constexpr index_t offset_of = []<std::size_t... J>(std::index_sequence<J...>) {
      return (index_t{0} + ... + std::tuple_element_t<J, tuple_type>::parameter_count);
    }(std::make_index_sequence<I>{});
    /// The number of layers (what Model::freeze counts).
    static constexpr std::size_t layer_count = n;
    /// Where each layer's parameters start in the arena, and (last) the parameter count.
    static constexpr std::array<index_t, n + 1> layer_offsets = []<std::size_t... J>(std::index_sequence<J...>) {
      return std::array<index_t, n + 1>{offset_of<J>..., parameter_count};
    }(std::make_index_sequence<n>{});

    /// The epilogue layer I stands for (nn/epilogue.hpp), or void.
    template <std::size_t I>
    using epilogue_at = typename epilogue_of<typename detail::type_at<I, typename info::layers>::type>::type;
    /// Whether layer I runs the activation at I + 1 as its epilogue (Linear, Conv2d, ConvTranspose2d or a
    /// normalisation, then an activation with an epilogue_of: every pointwise activation,
    /// nn/activation.hpp): the activation's own passes saved (a GroupNorm, LayerNorm or InstanceNorm
    /// saves its forward pass only).
    template <std::size_t I>
    static constexpr bool fused_with_next = [] {
      if constexpr (I + 1 >= n) return false;
      else if constexpr (!kiln::nn::fuses_epilogue<std::tuple_element_t<I, tuple_type>>) return false;
      else return !std::is_void_v<epilogue_at<I + 1>>;
    }();
    /// Whether layer I is an activation run by layer I - 1 (its own module then does no work).
    template <std::size_t I>
    static constexpr bool fused_into_previous = [] {
      if constexpr (I == 0) return false;
      else return fused_with_next<I - 1>;
    }();

    /// A Sequential whose last layer runs an epilogue runs one too: in an outer Sequential the activation
    /// after it runs inside that last layer (torch's `self.layer1 = nn.Sequential(nn.Linear(13, 16))`
    /// followed by `F.relu`, the seeds' Net1, written `Sequential<Sequential<Linear<13, 16>>, ReLU, ...>`).
    static constexpr bool fuses_epilogue = kiln::nn::fuses_epilogue<std::tuple_element_t<n - 1, tuple_type>>;
    /// The layers, the last one with epilogue E (its activation, from the Sequential holding this one).
    template <class E>
    Tensor<T, output_shape, D> forward_fused(const Tensor<T, S, D>& x, Context ctx) {
      keep_from_ = 0;
      return forward_from<0, E>(x, ctx);
    }
    /// Backward through the last layer's fused epilogue E, then the layers before it.
    template <class E>
    Tensor<T, S, D> backward_fused(const Tensor<T, output_shape, D>& dy, bool input_grad = true) {
      first_ = 0;
      auto dx = std::get<n - 1>(layers_).template backward_fused<E>(dy, wants_dx(n - 1, input_grad));
      if constexpr (n == 1) return dx;
      else return backward_from<n - 2>(dx, input_grad, nullptr);
    }

    /// A table like torchinfo's (detail::summary_table): a row per layer, a nested Sequential's layers
    /// under it. `frozen`: the first layers Model::freeze froze, marked "[frozen]".
    std::string summary(index_t batch = 1, std::size_t frozen = 0) const {
      std::vector<detail::SummaryRow> rows;
      summary_rows(rows, batch, "", frozen);
      return detail::summary_table<M, S, output_shape>(rows, batch, parameter_count, buffer_count);
    }
    /// The rows of summary(): this Sequential's layers numbered `prefix` + index (a nested one's layers
    /// "1.0", "1.1" under its own row "1"), the first `frozen` marked "[frozen]".
    void summary_rows(std::vector<detail::SummaryRow>& rows, index_t batch, const std::string& prefix,
                      std::size_t frozen) const {
      summary_rows_from<0>(rows, batch, prefix, frozen);
    }

    template <std::size_t I>
    auto& layer() {
      return std::get<I>(layers_);
    }

   private:
    /// Layers I to the last; `Last`: the epilogue the last layer runs (forward_fused), or void.
    template <std::size_t I, class Last = void, class X>
    auto forward_from(const X& x, Context ctx) {
      if constexpr (I == n) {
        return x;
      } else {
        Context own = ctx;  // layer I's: keeps nothing for backward before keep_from_
        if (I < keep_from_) own.grad = false;
        if constexpr (I == n - 1 && !std::is_void_v<Last>) {
          return std::get<I>(layers_).template forward_fused<Last>(x, own);
        } else if constexpr (fused_with_next<I>) {  // layer I + 1 runs inside layer I's epilogue
          ran_fused_[I] = fusion_enabled();  // unless fusion is off (kiln::Unfused): two layers
          if (!ran_fused_[I]) return forward_from<I + 1, Last>(std::get<I>(layers_).forward(x, own), ctx);
          return forward_from<I + 2, Last>(std::get<I>(layers_).template forward_fused<epilogue_at<I + 1>>(x, own),
                                           ctx);
        } else {
          return forward_from<I + 1, Last>(std::get<I>(layers_).forward(x, own), ctx);
        }
      }
    }
    template <std::size_t I, class G>
    auto backward_from(const G& dy, bool input_grad, const GradientsReady* ready) {
      if (I < first_) return Tensor<T, S, D>{};  // frozen from here down (first_ is 0 unless frozen)
      if constexpr (fused_into_previous<I>) {
        if (!ran_fused_[I - 1]) return backward_unfused<I>(dy, input_grad, ready);  // forward ran two layers
        if (I - 1 < first_) return Tensor<T, S, D>{};  // a frozen layer I - 1 under its activation I
        auto dx = std::get<I - 1>(layers_).template backward_fused<epilogue_at<I>>(dy, wants_dx(I - 1, input_grad));
        tell_ready<I - 1>(ready);
        if constexpr (I == 1) return dx;
        else return backward_from<I - 2>(dx, input_grad, ready);
      } else {
        return backward_unfused<I>(dy, input_grad, ready);
      }
    }
    /// Layer I's own backward, then the layers before it.
    template <std::size_t I, class G>
    auto backward_unfused(const G& dy, bool input_grad, const GradientsReady* ready) {
      auto dx = detail::backward_of(std::get<I>(layers_), dy, wants_dx(I, input_grad));
      tell_ready<I>(ready);
      if constexpr (I == 0) return dx;
      else return backward_from<I - 1>(dx, input_grad, ready);
    }
    /// Whether layer `layer`'s backward computes its dL/dx: a layer before it is trained, or the caller
    /// wants dL/dx of the input (a function, so that layer 0 is no "comparison with zero" to nvcc).
    bool wants_dx(std::size_t layer, bool input_grad) const { return layer > first_ || input_grad; }
    template <std::size_t I>
    static void tell_ready(const GradientsReady* ready) {
      if constexpr (std::tuple_element_t<I, tuple_type>::parameter_count > 0)
        if (ready && *ready) (*ready)(offset_of<I>);
    }
    template <std::size_t I>
    void summary_rows_from(std::vector<detail::SummaryRow>& rows, index_t batch, const std::string& prefix,
                           std::size_t frozen) const {
      if constexpr (I < n) {
        using Mod = std::tuple_element_t<I, tuple_type>;
        const std::string index = prefix + std::to_string(I);
        const std::string indent(2 * static_cast<std::size_t>(std::count(prefix.begin(), prefix.end(), '.')), ' ');
        std::string layer = indent + std::get<I>(layers_).name();
        if constexpr (fused_into_previous<I>) layer += " [fused into " + prefix + std::to_string(I - 1) + "]";
        if (I < frozen) layer += " [frozen]";
        rows.push_back({index, layer, detail::shape_string<typename Mod::output_shape>(batch),
                        std::to_string(Mod::parameter_count)});
        if constexpr (requires { std::get<I>(layers_).summary_rows(rows, batch, prefix, frozen); })
          std::get<I>(layers_).summary_rows(rows, batch, index + ".", I < frozen ? Mod::layer_count : 0);
        summary_rows_from<I + 1>(rows, batch, prefix, frozen);
      }
    }

    tuple_type layers_;
    std::array<bool, n> ran_fused_{};  // per layer: whether the last forward ran it with the next fused
    std::size_t first_ = 0;           // the backward in progress stops before this layer (Model::freeze)
    std::size_t keep_from_ = 0;       // the last forward kept nothing in the layers before this one
  };
};

namespace detail {
template <class... Layers>
struct holds_layers<Sequential<Layers...>> : std::true_type {
  template <class In>
  using quiet = typename quiet_output<In, Layers...>::type;
  template <class In>
  using after_failure = typename infer<0, In, Layers...>::recovered;
};
}  // namespace detail

}  // namespace kiln::nn
