/// The layer protocol: a layer is a type (spec) that, given an input shape and a Policy, yields a module.
#pragma once
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/index.hpp"
#include "kiln/core/nan.hpp"
#include "kiln/policy/policy.hpp"
#include "kiln/tensor/shape.hpp"

namespace kiln::nn {

class ReplicaGroup;  // kiln/nn/replica_group.hpp

/// How a forward pass runs: training (dropout on) or evaluation, whether it keeps what the backward
/// pass needs (off = torch.no_grad(): inference keeps no activations), and the replicas that train
/// together (null: this model alone), which SyncBatchNorm reduces its statistics over.
struct Context {
  bool training = true;
  bool grad = true;
  ReplicaGroup* replicas = nullptr;
  /// The model's training forwards so far, this one counted (Model::training_forwards): the counter
  /// dropout masks are drawn with, so that a checkpoint that keeps it resumes them. 0: no model counts
  /// (a layer used alone counts its own calls).
  std::uint64_t step = 0;
};

/// Told during a backward pass as layers finish, in reverse order: ready(offset) means the gradients at
/// arena offsets >= offset are final for this pass (DistributedDataParallel starts all-reducing a
/// bucket as soon as all of it is ready, while the earlier layers still run).
using GradientsReady = std::function<void(index_t)>;

/// The seeded generator every initialisation and dropout mask draws from (runs are reproducible).
using Generator = std::mt19937_64;

/// A parameter in the model's arena: its name ("weight"), offset, element count and shape, in
/// PyTorch's state_dict spelling once prefixed by the layer index ("0.weight"). `arena`: the first
/// element of the model's parameter arena, set by Model::named_parameters() (null in a layer's own
/// list), so that an optimizer can tell another model's parameters from its own. `requires_grad`:
/// torch's p.requires_grad, false for a parameter of the layers Model::freeze froze.
struct ParameterInfo {
  std::string name;
  index_t offset = 0;
  index_t count = 0;
  std::vector<index_t> shape;
  const void* arena = nullptr;
  bool requires_grad = true;
};

/// A buffer in the model's buffer arena: state that a layer updates itself and that is not a parameter
/// (BatchNorm's running statistics), named as in PyTorch's state_dict once prefixed ("1.running_mean").
/// `integer`: torch holds it as int64 (num_batches_tracked); kiln keeps it in the arena's floating type
/// (exact to 2^24 in float) and checkpoints write it as int64.
struct BufferInfo {
  std::string name;
  index_t offset = 0;
  index_t count = 0;
  std::vector<index_t> shape;
  bool integer = false;
};

/// A layer spec L, for an input shape In it accepts:
///   L::accepts<In>            whether In fits (checked by Sequential with a readable error)
///   L::output<In>             the output shape
///   L::module<In, P>          the runtime module (a layer of your own: docs/models.md, "Layers of your
///                             own"): types T (storage), M (master), D (device), input_shape, output_shape
///                             (the summary's); parameter_count, its slice of the model's arenas;
///                             bind(params, grads, work, device) points it at that slice (work: the
///                             storage-type working copy under mixed precision); reset_parameters(gen);
///                             parameters(): names, offsets from the slice's start, shapes;
///                             forward(x, ctx) -> y, keeping what backward needs only when ctx.grad;
///                             backward(dy) -> dx, ADDING to its gradients (+=, as torch's .grad), or
///                             backward(dy, input_grad) where dx may be skipped; name()
///                             and, for a module with buffers (BatchNorm), buffer_count,
///                             bind_buffers(buffers, device), init_buffers(host), buffers()
///   L::failed<In>             optional, for a layer holding others (Sequential, Residual, Add, Concat):
///                             whether one of them did not fit (its error is out; nothing is inferred
///                             past L, so that error comes alone)
///   L::expects<In>            optional: what L would take where it is given an In it does not accept,
///                             named by the compile error next to In: a Shape (Linear<120, 84> given
///                             [N, 100]: Shape<dyn, 120>), or where no one shape says it, a tag naming
///                             L's rule (any_shape_of_rank<2>, below); see_the_layers_accepts without it
/// Requirements are checked where the pieces meet (Sequential), not here, to keep errors short.
template <class L, class In>
concept layer_for = requires {
  { L::template accepts<In> } -> std::convertible_to<bool>;
};

// What a layer expects, where no one shape says it: the last template argument of the errors
// kiln::nn::layer_input_mismatch (nn/sequential.hpp) and branch_input_mismatch (nn/branches.hpp).

/// Any shape of rank Rank (Dropout1d: [N, C, L]; Dropout2d: [N, C, H, W]).
template <std::size_t Rank>
struct any_shape_of_rank {};
/// Any shape of rank Rank or more (Softmax<Dim>: one that has a dimension Dim).
template <std::size_t Rank>
struct any_shape_of_rank_at_least {};
/// A shape of rank Rank whose extents past the batch are all static (adaptive pooling, Upsample; pooling
/// and padding layers given another rank or a dyn extent past the batch).
template <std::size_t Rank>
struct static_shape_of_rank {};
/// A shape of rank Rank or more whose extents past the batch are all static (Flatten: 2).
template <std::size_t Rank>
struct static_shape_of_rank_at_least {};
/// The layer's own rule, its accepts<S>: the layer has no expects<S> (or is no layer).
struct see_the_layers_accepts {};

namespace detail {
/// Mod::buffer_count, or 0 for a module without buffers (most of them).
template <class Mod>
constexpr index_t buffer_count_of() {
  if constexpr (requires { Mod::buffer_count; }) return Mod::buffer_count;
  else return 0;
}
/// m.bind_buffers(buffers, device) (its slice of the model's buffer arena), if m has buffers.
template <class Mod, class M>
void bind_buffers_of(Mod& m, M* buffers, int device) {
  if constexpr (buffer_count_of<Mod>() > 0) m.bind_buffers(buffers, device);
}
/// m.init_buffers(host): m writes its buffers' initial values into a host copy of its slice.
template <class Mod, class M>
void init_buffers_of(const Mod& m, M* host) {
  if constexpr (buffer_count_of<Mod>() > 0) m.init_buffers(host);
}
/// m.buffers(), or none.
template <class Mod>
std::vector<BufferInfo> buffers_of(const Mod& m) {
  if constexpr (buffer_count_of<Mod>() > 0) return m.buffers();
  else return {};
}

/// The least rank with a dimension Dim (negative: from the end, as torch's dim=-1): Softmax<Dim>,
/// Unflatten<Dim, ...>.
template <int Dim>
inline constexpr std::size_t rank_with_dim = Dim >= 0 ? static_cast<std::size_t>(Dim) + 1 : static_cast<std::size_t>(-Dim);

/// Extent i of S, or dyn past its rank.
template <class S>
constexpr index_t extent_or_dyn(std::size_t i) {
  if constexpr (S::rank == 0)
    return dyn;
  else
    return i < S::rank ? S::extents[i] : dyn;
}
/// Extent e, raised to `least` when smaller (dyn stays dyn).
constexpr index_t at_least(index_t e, index_t least) { return e == dyn || e >= least ? e : least; }
/// Whether every extent of S past the batch is static.
template <class S>
constexpr bool static_past_the_batch() {
  if constexpr (S::rank > 1)
    for (std::size_t i = 1; i < S::rank; ++i)
      if (S::extents[i] == dyn) return false;
  return true;
}

/// What a layer over the C channels (features) at dimension 1 of a rank-Rank input expects where it is
/// given S (its expects<S>): S with dimension 1 set to C and the dimensions past it raised to
/// LeastSpatial when S has rank Rank, else [S's dimension 0, C, dyn, ...] of rank Rank. A LeastSpatial
/// above 0 also stands for a static extent (convolutions): a dyn one, or one S lacks, shows as
/// LeastSpatial, the least static extent taken (Conv2d<3, 6, 5> given [N, 3072]: [N, 3, 5, 5]).
template <class S, std::size_t Rank, index_t C, index_t LeastSpatial = 0,
          class Index = std::make_index_sequence<Rank>>
struct with_channels;
template <class S, std::size_t Rank, index_t C, index_t LeastSpatial, std::size_t... I>
struct with_channels<S, Rank, C, LeastSpatial, std::index_sequence<I...>> {
  using type = Shape<(I == 1   ? C
                      : I == 0 ? extent_or_dyn<S>(0)
                      : LeastSpatial > 0 && (S::rank != Rank || extent_or_dyn<S>(I) == dyn) ? LeastSpatial
                      : S::rank == Rank ? at_least(extent_or_dyn<S>(I), LeastSpatial)
                                        : dyn)...>;
};

/// What a layer over [N, C, H, W] with static C, H and W expects where it is given S (its expects<S>):
/// S with H and W raised to LeastH and LeastW when S is such a shape, else static_shape_of_rank<4>.
template <class S, index_t LeastH, index_t LeastW>
using static_image_at_least =
    std::conditional_t<S::rank == 4 && static_past_the_batch<S>(),
                       Shape<extent_or_dyn<S>(0), extent_or_dyn<S>(1), at_least(extent_or_dyn<S>(2), LeastH),
                             at_least(extent_or_dyn<S>(3), LeastW)>,
                       static_shape_of_rank<4>>;

/// What every layer without parameters has: its policy's types, its shapes, nothing to bind or
/// initialise. Its module derives from it: `class module : public detail::parameter_free<S, Out, P>`.
template <class S, class Out, class P>
struct parameter_free {
  using T = typename P::precision::storage;
  using M = typename P::precision::master;
  using D = typename P::device;
  using input_shape = S;
  using output_shape = Out;
  static constexpr index_t parameter_count = 0;
  void bind(M*, M*, T*, int) {}
  void reset_parameters(Generator&) {}
  std::vector<ParameterInfo> parameters() const { return {}; }
};

/// A number as Python's repr prints a float, for torch's module names ("0.01", "1.0", "1e-05", "1e+16"):
/// the shortest digits that read back as the same F, positional for decimal exponents -4 to 15 and
/// scientific outside, whatever the locale.
template <class F>
std::string python_float(F v) {
  if (kiln::detail::is_nan(v)) return "nan";
  if (v == std::numeric_limits<F>::infinity()) return "inf";
  if (v == -std::numeric_limits<F>::infinity()) return "-inf";
  char buf[64];
  const auto end = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific).ptr;
  const std::string s(buf, end);  // [-]d[.ddd]e±XX
  const std::size_t e = s.find('e');
  const int exp = std::atoi(s.c_str() + e + 1);
  const bool negative = s[0] == '-';
  std::string digits;
  for (std::size_t i = negative ? 1 : 0; i < e; ++i)
    if (s[i] != '.') digits += s[i];
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "") + (exp < 0 ? "e-" : "e+") +
          (std::abs(exp) < 10 ? "0" : "") + std::to_string(std::abs(exp));
  } else if (exp < 0) {
    out = "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
  } else if (digits.size() <= static_cast<std::size_t>(exp) + 1) {
    out = digits + std::string(static_cast<std::size_t>(exp) + 1 - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<std::size_t>(exp) + 1) + "." + digits.substr(static_cast<std::size_t>(exp) + 1);
  }
  return (negative ? "-" : "") + out;
}

/// backward(dy, input_grad) where the module takes the flag (layers with parameters skip dL/dx when
/// nothing needs it, as PyTorch does for an input that does not require grad), else backward(dy).
template <class Mod, class G>
auto backward_of(Mod& m, const G& dy, bool input_grad) {
  if constexpr (requires { m.backward(dy, input_grad); })
    return m.backward(dy, input_grad);
  else
    return m.backward(dy);
}

/// A layer's backward takes a dy of its forward pass's rows (what the layer saved, and dx, have them;
/// more would read past them): else a ShapeError naming the layer, before anything is written.
inline void check_backward_rows(const std::string& layer, index_t dy_rows, index_t forward_rows) {
  if (dy_rows != forward_rows)
    throw ShapeError("kiln::nn::" + layer + "::backward: dy has " + std::to_string(dy_rows) +
                     " rows; the forward pass had " + std::to_string(forward_rows));
}

/// U(-bound, bound) into host memory (PyTorch's kaiming_uniform_(a = sqrt(5)) and bias init both
/// reduce to bound = 1 / sqrt(fan_in)).
template <class T>
void uniform_fill(std::vector<T>& v, double bound, Generator& g) {
  std::uniform_real_distribution<double> u(-bound, bound);
  for (auto& x : v) x = static_cast<T>(u(g));
}
}  // namespace detail

}  // namespace kiln::nn
