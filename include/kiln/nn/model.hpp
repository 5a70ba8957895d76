/// Model: a network type instantiated for an input shape and a Policy, owning one contiguous parameter
/// arena and one gradient arena (so an optimizer steps the whole model in one pass).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/expr/cast.hpp"
#include "kiln/nn/layer.hpp"
#include "kiln/nn/model_input.hpp"
#include "kiln/nn/sequential.hpp"
#include "kiln/policy/policy.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn {

/// Owns the parameters of Net for inputs of shape In under policy P.
/// Under a mixed precision (MixedFp16, MixedBf16) the arenas hold float32 master parameters and
/// gradients, and a third arena holds the working copy in the storage type that GEMMs and convolutions
/// read. The optimizer's fused step rewrites the working copy as it updates the masters; after any other
/// change (parameters() taken non-const: a checkpoint load, an initialisation) the next forward refreshes
/// it in one pass.
/// Example:
///   using Mlp = kiln::nn::Sequential<kiln::nn::Linear<13, 16>, kiln::nn::ReLU, kiln::nn::Linear<16, 1>>;
///   kiln::nn::Model<Mlp, kiln::Shape<kiln::dyn, 13>> model(/*seed=*/0);
///   auto y = model.forward(x);          // [N, 1]
///   model.backward(dy);                 // accumulates into model.gradients(); uses up what forward kept
///   // or instead: auto dx = model.backward_input(dy);  // the same, and returns dL/dx
template <class Net, class In, policy P = Policy<>>
class Model {
  // >>> Stopped here? Model<Net, InputShape, Policy>: the input shape second (torch's modules have none). <<<
  static_assert(kiln::shape<In>,
                "kiln::nn::Model<Net, In, P>: In is the input shape, e.g. kiln::Shape<kiln::dyn, 3, 32, 32> (the "
                "batch dimension dyn); the Policy comes third: Model<Net, Shape<dyn, 13>, Policy<Fp32, Cpu>>");
  // >>> Stopped here? A Model is one device's network; data parallelism wraps it. <<<
  static_assert(std::is_same_v<typename P::parallel, SingleDevice>,
                "kiln::nn::Model: the Policy's parallel axis must be SingleDevice (a Model is one device's "
                "network); for data parallelism wrap the network instead: "
                "kiln::parallel::DataParallel<Net, In, Precision, Device> or "
                "kiln::parallel::DistributedDataParallel<Net, In, Backend, Precision, Device> (docs/parallel.md)");

  // A network that is one bare layer (Model<Linear<13, 16>, Shape<dyn, 12>>) is checked against In as a
  // Sequential checks its layers, as its layer 0: one error, kiln::nn::layer_input_mismatch<0, ...>.
  using checked_net = typename detail::type_at<0, typename detail::infer<0, In, Net>::layers>::type;

 public:
  using network = typename checked_net::template module<In, P>;
  using T = typename P::precision::storage;
  using M = typename P::precision::master;
  using D = typename P::device;
  using precision = typename P::precision;
  using input_shape = In;
  using output_shape = typename network::output_shape;
  using arena_type = Tensor<M, Shape<dyn>, D>;
  using working_arena_type = Tensor<T, Shape<dyn>, D>;
  static constexpr index_t parameter_count = network::parameter_count;
  /// Elements of state the layers update themselves (BatchNorm's running statistics): the buffer arena.
  static constexpr index_t buffer_count = detail::buffer_count_of<network>();
  /// Whether GEMMs read a low-precision copy of the parameters (storage type differs from master).
  static constexpr bool has_working_copy = !std::is_same_v<T, M>;

  /// Allocates the arenas on device `index` and initialises the parameters from `seed` like PyTorch.
  explicit Model(std::uint64_t seed = 0, int index = -1)
      : params_(Extents<Shape<dyn>>(parameter_count), index), grads_(Extents<Shape<dyn>>(parameter_count), index) {
    if constexpr (has_working_copy) {
      work_ = working_arena_type(Extents<Shape<dyn>>(parameter_count), params_.device_index());
      net_.bind(params_.data(), grads_.data(), work_.data(), params_.device_index());
    } else {
      net_.bind(params_.data(), grads_.data(), params_.data(), params_.device_index());
    }
    if (params_.storage()) params_.storage()->model_parameters = true;  // (clip_grad_norm refuses it)
    Generator g(seed);
    net_.reset_parameters(g);
    zero_grad();
    if constexpr (buffer_count > 0) {
      buffers_ = arena_type(Extents<Shape<dyn>>(buffer_count), params_.device_index());
      net_.bind_buffers(buffers_.data(), params_.device_index());
      reset_buffers();
    }
  }
  Model(const Model&) = delete;  // modules point into the arenas
  Model& operator=(const Model&) = delete;

  /// Forward pass; keeps what backward needs unless in no-grad mode.
  Tensor<T, output_shape, D> forward(const Tensor<T, In, D>& x) {
    kiln::detail::check_same_device("kiln::nn::Model::forward (the model, its input)", params_.device_index(),
                                    kiln::detail::pass_device(x));
    const kiln::detail::device_scope<D> on(params_.device_index());  // the model's GPU, whichever is current
    refresh_working_copy();
    saved_rows_ = -1;  // a forward that throws keeps nothing
    // The frozen layers keep nothing for backward, which does not reach them (torch builds no graph
    // through them), unless dL/dx is wanted (set_input_requires_grad).
    kept_from_ = input_requires_grad_ ? 0 : first_trainable(frozen_layers_);
    if (ctx_.training) ctx_.step = ++training_forwards_;
    auto y = forward_keeping_from(x, kept_from_);
    saved_rows_ = ctx_.grad ? x.size(0) : -1;
    return y;
  }
  Tensor<T, output_shape, D> operator()(const Tensor<T, In, D>& x) { return forward(x); }
  /// Another tensor type where it fits: a static batch into the model's dyn one (a view), a float tensor
  /// into a half or bfloat16 model (cast first, one pass, as autocast casts it). Anything else is a
  /// compile error naming the model's input and the tensor given (model_input_mismatch).
  template <class U, class S, class D2>
  Tensor<T, output_shape, D> forward(const Tensor<U, S, D2>& x) {
    return forward(detail::as_model_input<T, In, D>(x));
  }
  template <class U, class S, class D2>
  Tensor<T, output_shape, D> operator()(const Tensor<U, S, D2>& x) {
    return forward(detail::as_model_input<T, In, D>(x));
  }
  /// Backward pass from dL/dy: parameter gradients are accumulated (call zero_grad() between steps), as
  /// loss.backward() in PyTorch; the input's gradient is not computed (the input does not require grad).
  /// It stops before the frozen layers (freeze).
  void backward(const Tensor<T, output_shape, D>& dy) {
    use_activations("kiln::nn::Model::backward (the model, dy)", dy);
    const kiln::detail::device_scope<D> on(params_.device_index());
    backward_through(dy, nullptr);
  }
  /// torch's `loss.backward()` written model.backward(loss), refused with the way kiln writes it: a loss
  /// value (rank 0) has no graph behind it; the loss's backward gives dL/dy for the model's.
  template <class U>
    requires(output_shape::rank != 0)
  void backward(const Tensor<U, Shape<>, D>&) {
    static_assert(kiln::detail::dependent_false<U>,
                  "kiln::nn::Model::backward takes dL/dy, the gradient of the loss with respect to the model's "
                  "output, not the loss's value: model.backward(ce.backward(logits, y)) where torch writes "
                  "loss.backward()");
  }
  /// The same, telling `ready` as the gradients become final (see GradientsReady): once per layer with
  /// parameters, from the last, and ready(0) at the end.
  void backward(const Tensor<T, output_shape, D>& dy, const GradientsReady& ready) {
    use_activations("kiln::nn::Model::backward (the model, dy)", dy);
    const kiln::detail::device_scope<D> on(params_.device_index());
    backward_through(dy, &ready);
    if (ready) ready(0);
  }
  /// Backward pass that also returns dL/dx (PyTorch: x.requires_grad_() and read x.grad). With layers
  /// frozen, the forward must have kept their activations: set_input_requires_grad(true) before it (a
  /// ValueError otherwise, and the activations stay for a backward()); dL/dx then goes back through
  /// them, as torch's, and their gradients stay 0.
  Tensor<T, In, D> backward_input(const Tensor<T, output_shape, D>& dy) {
    if (kept_from_ > 0 && saved_rows_ >= 0)
      throw ValueError("kiln::nn::Model::backward_input: layers 0 to " + std::to_string(kept_from_ - 1) +
                       " kept nothing to go back through in the forward (layers 0 to " +
                       std::to_string(frozen_layers_ - 1) + " are frozen; torch: an input that does not require "
                       "grad); call model.set_input_requires_grad(true) before the forward (torch's "
                       "x.requires_grad_()) to take dL/dx through them");
    use_activations("kiln::nn::Model::backward_input (the model, dy)", dy);
    const kiln::detail::device_scope<D> on(params_.device_index());
    auto dx = detail::backward_of(net_, dy, true);
    zero_frozen_gradients();
    unreached_ = frozen_parameter_count();
    return dx;
  }

  /// The number of layers freeze() counts: a Sequential's, or 1 for a network that is one bare layer.
  static constexpr std::size_t layer_count = [] {
    if constexpr (requires { network::layer_count; }) return network::layer_count;
    else return std::size_t{1};
  }();
  /// torch's requires_grad_(False) on the network's first `layers` layers (`model[:layers]` of an
  /// nn.Sequential, negative counting from the end as there: -1 all but the last; the backbone, to
  /// fine-tune the head): backward stops before them (nothing of theirs is computed), their gradients
  /// are set to 0 and stay 0, and every optimizer built on this model leaves their parameters as they
  /// are: no step, no weight decay, no momentum or moment updates (torch's optimizers skip a parameter
  /// whose grad is None). freeze(0), or unfreeze(), trains every layer again. Throws ValueError outside
  /// -layer_count .. layer_count.
  void freeze(std::ptrdiff_t layers) {
    const auto count = static_cast<std::ptrdiff_t>(layer_count);
    if (layers > count || layers < -count)
      throw ValueError("kiln::nn::Model::freeze: " + std::to_string(layers) + " layers, but the network has " +
                       std::to_string(layer_count) + "; give 0 to " + std::to_string(layer_count) +
                       " (the first layers to freeze), or -1 to -" + std::to_string(layer_count) +
                       " (all but the last ones, as torch's model[:-1])");
    frozen_layers_ = static_cast<std::size_t>(layers < 0 ? count + layers : layers);
    zero_frozen_gradients();
  }
  void unfreeze() { frozen_layers_ = 0; }
  /// How many of the first layers are frozen (0: none).
  std::size_t frozen_layers() const { return frozen_layers_; }
  /// torch's x.requires_grad_() for the inputs of the next forwards: with layers frozen, they keep
  /// their activations so that backward_input can take dL/dx through them (off: they keep none, as
  /// torch's build no graph there). Without frozen layers every layer keeps them anyway.
  void set_input_requires_grad(bool on) { input_requires_grad_ = on; }
  bool input_requires_grad() const { return input_requires_grad_; }
  /// Where backward stops with the first `frozen` layers frozen: the first layer from there that has
  /// parameters (the layers without any before it would compute a dL/dx that nothing reads), or
  /// layer_count when none has; 0 for none frozen.
  static constexpr std::size_t first_trainable(std::size_t frozen) {
    if (frozen == 0) return 0;
    std::size_t i = frozen;
    while (i < layer_count && layer_offset(i + 1) == layer_offset(i)) ++i;
    return i;
  }
  /// The frozen layers' parameters: the arena's first frozen_parameter_count() elements.
  index_t frozen_parameter_count() const { return layer_offset(frozen_layers_); }
  /// The arena's first parameters that optimizers skip: the frozen layers', or those the last backward
  /// did not reach if more (layers unfrozen after the forward: torch's grad stays None for them until
  /// a backward reaches them, and its optimizers skip them).
  index_t parameters_without_gradient() const { return std::max(frozen_parameter_count(), unreached_); }
  /// Where layer k's parameters start in the arena (k = layer_count: the parameter count); ValueError
  /// past that.
  static constexpr index_t layer_offset(std::size_t k) {
    if (k > layer_count)
      throw ValueError("kiln::nn::Model::layer_offset: layer " + std::to_string(k) + " of a network of " +
                       std::to_string(layer_count) + " layers; give 0 to " + std::to_string(layer_count));
    if constexpr (requires { network::layer_offsets; }) return network::layer_offsets[k];
    else return k == 0 ? 0 : parameter_count;
  }

  void zero_grad() { grads_.fill(M(0)); }
  /// Training mode (dropout active) or evaluation mode, like module.train() / module.eval().
  void train(bool on = true) { ctx_.training = on; }
  void eval() { ctx_.training = false; }
  bool training() const { return ctx_.training; }
  /// Whether forward keeps activations for backward (off: torch.no_grad(); see NoGrad).
  void set_grad_enabled(bool on) { ctx_.grad = on; }
  bool grad_enabled() const { return ctx_.grad; }
  /// The replicas this model trains with (DistributedDataParallel sets its ranks; null: alone), which
  /// layers that synchronise across replicas (SyncBatchNorm) reduce over in training forwards and
  /// their backward passes. The group must outlive the model's use of it.
  void set_replica_group(ReplicaGroup* group) { ctx_.replicas = group; }
  ReplicaGroup* replica_group() const { return ctx_.replicas; }
  /// Forwards run in training mode so far: the counter the dropout layers draw their masks with (with
  /// the seed each took from the model's). save_checkpoint keeps it ("kiln.training_forwards") and
  /// load_checkpoint restores it, so that a resumed run draws the masks the run it resumes would have,
  /// given a model built with the same seed (torch's resume restores its RNG state by hand).
  std::uint64_t training_forwards() const { return training_forwards_; }
  void set_training_forwards(std::uint64_t n) { training_forwards_ = n; }
  /// Backward passes begun so far (each uses up a forward's activations): what DistributedDataParallel
  /// checks to see that its forward was followed by its own backward, not the module's.
  std::uint64_t backward_count() const { return backwards_; }

  /// The master parameters. Taken non-const, the working copy (mixed precision) is refreshed from them
  /// at the next forward; change them through a reference taken earlier and call
  /// mark_parameters_changed() yourself.
  arena_type& parameters() {
    mark_parameters_changed();
    return params_;
  }
  const arena_type& parameters() const { return params_; }
  /// The low-precision copy of the parameters that GEMMs read (mixed precision only); optimizers
  /// rewrite it in their step's pass.
  working_arena_type& working_parameters()
    requires has_working_copy
  {
    return work_;
  }
  /// The working copy no longer matches the masters: the next forward converts them (one pass).
  void mark_parameters_changed() {
    if constexpr (has_working_copy) stale_ = true;
  }
  /// The buffers (BatchNorm's running statistics), as torch's module.buffers(): updated by training
  /// forwards, read by evaluation ones, saved with the parameters, never stepped by an optimizer.
  /// Empty for a network without buffers.
  arena_type& buffers() { return buffers_; }
  const arena_type& buffers() const { return buffers_; }
  /// Names, offsets and shapes in PyTorch's state_dict spelling ("1.running_mean").
  std::vector<BufferInfo> named_buffers() const {
    if constexpr (buffer_count > 0) return net_.buffers();
    else return {};
  }
  /// Every buffer back to its initial value (running mean 0, running variance 1, no batches tracked),
  /// as torch's reset_running_stats().
  void reset_buffers() {
    if constexpr (buffer_count > 0) {
      std::vector<M> host(static_cast<std::size_t>(buffer_count), M(0));
      net_.init_buffers(host.data());
      buffers_.copy_from(std::span<const M>(host.data(), host.size()));
    }
  }
  arena_type& gradients() { return grads_; }
  const arena_type& gradients() const { return grads_; }
  /// Names, offsets and shapes in PyTorch's state_dict spelling ("0.weight", "2.bias"),
  /// each marked as this model's (ParameterInfo::arena), and requires_grad false in the frozen layers.
  std::vector<ParameterInfo> named_parameters() const {
    std::vector<ParameterInfo> all = net_.parameters();
    const index_t frozen = frozen_parameter_count();
    for (auto& p : all) {
      p.arena = params_.data();
      p.requires_grad = p.offset >= frozen;
    }
    return all;
  }
  network& net() { return net_; }
  /// The network's table (layers, output shapes, parameters), and with layers frozen the trainable and
  /// frozen parameter counts (torchinfo's "Trainable params" and "Non-trainable params").
  [[nodiscard]] std::string summary(index_t batch = 1) const {
    std::string s;
    if constexpr (requires { net_.summary(batch, frozen_layers_); }) {
      s = net_.summary(batch, frozen_layers_);
    } else {  // one layer (a Linear, a Residual) as the whole network: a table of one row
      s = detail::summary_table<M, input_shape, output_shape>(
          {{"0", net_.name() + (frozen_layers_ > 0 ? " [frozen]" : ""), detail::shape_string<output_shape>(batch),
            std::to_string(parameter_count)}},
          batch, parameter_count, buffer_count);
    }
    if (frozen_layers_ > 0)
      s += "trainable parameters: " + std::to_string(parameter_count - frozen_parameter_count()) + " (frozen: " +
           std::to_string(frozen_parameter_count()) + ", in layers 0 to " + std::to_string(frozen_layers_ - 1) + ")\n";
    return s;
  }

 private:
  /// Checks dy before a backward pass, which then uses up the activations the last forward kept (as
  /// torch's graph without retain_graph): dy on the model's GPU (a ValueError naming both otherwise),
  /// after a forward that kept its activations and no backward since (kiln::Error otherwise), with that
  /// forward's batch (a ShapeError otherwise: the layers would read and write past the activations they
  /// kept; torch: "Mismatch in shape"). Nothing is changed when it throws.
  void use_activations(const char* what, const Tensor<T, output_shape, D>& dy) {
    kiln::detail::check_same_device(what, params_.device_index(), kiln::detail::pass_device(dy));
    if (saved_rows_ < 0)
      throw Error(std::string(what) + ": no activations to go back through (forward under NoGrad, or a "
                  "backward since): run forward with gradients enabled first");
    if (dy.size(0) != saved_rows_)
      throw ShapeError(std::string(what) + ": dy " + to_string(dy.extents()) + " for a forward of " +
                       std::to_string(saved_rows_) + " rows: dy must have the shape of the last forward's output");
    saved_rows_ = -1;
    ++backwards_;
  }
  /// The forward pass, its layers before `keep_from` keeping nothing for backward.
  Tensor<T, output_shape, D> forward_keeping_from(const Tensor<T, In, D>& x, std::size_t keep_from) {
    if constexpr (requires { net_.forward(x, ctx_, keep_from); }) {
      return net_.forward(x, ctx_, keep_from);
    } else {  // a network that is one bare layer: frozen (keep_from 1), or not
      Context ctx = ctx_;
      if (keep_from > 0) ctx.grad = false;
      return net_.forward(x, ctx);
    }
  }
  /// dy back through the layers not frozen: from the last down to the first trainable one (the frozen
  /// layers' now, or the last forward's, whichever is later: those before it kept nothing).
  void backward_through(const Tensor<T, output_shape, D>& dy, const GradientsReady* ready) {
    const std::size_t first = std::max(kept_from_, first_trainable(frozen_layers_));
    unreached_ = layer_offset(first);
    if (first > 0) {
      if constexpr (requires { net_.backward(dy, false, ready, first); }) (void)net_.backward(dy, false, ready, first);
      // else: a network that is one bare layer, frozen: nothing to go back through
    } else if (ready != nullptr) {
      if constexpr (requires { net_.backward(dy, false, ready); }) (void)net_.backward(dy, false, ready);
      else (void)detail::backward_of(net_, dy, false);
    } else {
      (void)detail::backward_of(net_, dy, false);
    }
  }
  void zero_frozen_gradients() {
    if (const index_t n = frozen_parameter_count(); n > 0)
      arena_type::from_blob(grads_.data(), Extents<Shape<dyn>>(n), grads_.device_index()).fill(M(0));
  }
  void refresh_working_copy() {
    if constexpr (has_working_copy) {
      if (!stale_) return;
      kiln::assign(work_, cast<T>(params_));
      stale_ = false;
    }
  }

  arena_type params_;
  arena_type grads_;
  working_arena_type work_;  // mixed precision only
  arena_type buffers_;       // networks with buffers only
  bool stale_ = true;
  index_t saved_rows_ = -1;  // the batch of the last forward that kept its activations (-1: none)
  std::size_t frozen_layers_ = 0;  // freeze()
  std::size_t kept_from_ = 0;      // the last forward's layers before this one kept nothing (frozen)
  index_t unreached_ = 0;          // the parameters before this offset got no gradient in the last backward
  bool input_requires_grad_ = false;
  std::uint64_t training_forwards_ = 0;  // training_forwards()
  std::uint64_t backwards_ = 0;          // backward_count()
  network net_;
  Context ctx_{};
};

namespace detail {
/// What `NoGrad guard;` (no model) deduces: its class then stops with a message.
struct no_model {};
}  // namespace detail

/// Inference without gradients for a scope, like `with torch.no_grad():` — forward keeps no activations.
template <class Model = detail::no_model>
class NoGrad {
  // >>> Stopped here? NoGrad was given no model: `kiln::nn::NoGrad guard;`. <<<
  static_assert(!std::is_same_v<Model, detail::no_model>,
                "kiln::nn::NoGrad guards one model: kiln::nn::NoGrad guard(model); (torch's torch.no_grad() is "
                "global; in kiln each model has its own switch, so name the model whose forward keeps nothing: "
                "under DataParallel or DistributedDataParallel, the wrapper's module())");
  static constexpr bool is_model = requires(Model& m) {
    m.grad_enabled();
    m.set_grad_enabled(false);
  };
  // >>> Stopped here? NoGrad was given something that is no model (an optimizer, a loss, a tensor). <<<
  static_assert(std::is_same_v<Model, detail::no_model> || is_model,
                "kiln::nn::NoGrad guards a model (a kiln::nn::Model, or a DataParallel's or "
                "DistributedDataParallel's module()): kiln::nn::NoGrad guard(model); not an optimizer, a "
                "loss or a tensor");

 public:
  NoGrad()
    requires std::is_same_v<Model, detail::no_model>;  // (declared only: the static_assert above says why)
  explicit NoGrad(Model& m) : m_(m), was_(read(m)) { set(m_, false); }
  ~NoGrad() { set(m_, was_); }
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  // (no call into what is no model: the assertion's error alone)
  static bool read(Model& m) {
    if constexpr (is_model)
      return m.grad_enabled();
    else
      return true;
  }
  static void set(Model& m, bool on) {
    if constexpr (is_model) m.set_grad_enabled(on);
  }
  Model& m_;
  bool was_;
};

}  // namespace kiln::nn
