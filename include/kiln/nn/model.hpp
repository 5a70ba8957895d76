/// Model: a network type instantiated for an input shape and a Policy, owning one contiguous parameter
/// arena and one gradient arena (so an optimizer steps the whole model in one pass).
#pragma once
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
    auto y = net_.forward(x, ctx_);
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
  void backward(const Tensor<T, output_shape, D>& dy) {
    use_activations("kiln::nn::Model::backward (the model, dy)", dy);
    const kiln::detail::device_scope<D> on(params_.device_index());
    (void)detail::backward_of(net_, dy, false);
  }
  /// The same, telling `ready` as the gradients become final (see GradientsReady): once per layer with
  /// parameters, from the last, and ready(0) at the end.
  void backward(const Tensor<T, output_shape, D>& dy, const GradientsReady& ready) {
    use_activations("kiln::nn::Model::backward (the model, dy)", dy);
    const kiln::detail::device_scope<D> on(params_.device_index());
    if constexpr (requires { net_.backward(dy, false, &ready); }) (void)net_.backward(dy, false, &ready);
    else
      (void)detail::backward_of(net_, dy, false);
    if (ready) ready(0);
  }
  /// Backward pass that also returns dL/dx (PyTorch: x.requires_grad_() and read x.grad).
  Tensor<T, In, D> backward_input(const Tensor<T, output_shape, D>& dy) {
    use_activations("kiln::nn::Model::backward_input (the model, dy)", dy);
    const kiln::detail::device_scope<D> on(params_.device_index());
    return detail::backward_of(net_, dy, true);
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
  /// Names, offsets and shapes in PyTorch's state_dict spelling ("0.weight", "2.bias"), each marked as
  /// this model's (ParameterInfo::arena).
  std::vector<ParameterInfo> named_parameters() const {
    std::vector<ParameterInfo> all = net_.parameters();
    for (auto& p : all) p.arena = params_.data();
    return all;
  }
  network& net() { return net_; }
  [[nodiscard]] std::string summary(index_t batch = 1) const { return net_.summary(batch); }

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
  network net_;
  Context ctx_{};
};

/// Inference without gradients for a scope, like `with torch.no_grad():` — forward keeps no activations.
template <class Model>
class NoGrad {
 public:
  explicit NoGrad(Model& m) : m_(m), was_(m.grad_enabled()) { m_.set_grad_enabled(false); }
  ~NoGrad() { m_.set_grad_enabled(was_); }
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  Model& m_;
  bool was_;
};

}  // namespace kiln::nn
