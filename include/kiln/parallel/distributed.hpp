/// DistributedDataParallel: one process per device (started by mpirun), each with its own model and its
/// own share of the data; gradients averaged over the ranks in buckets while backward still runs, as
/// torch.nn.parallel.DistributedDataParallel.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/nn/model.hpp"
#include "kiln/nn/replica_group.hpp"
#include "kiln/parallel/buckets.hpp"
#include "kiln/parallel/process_group.hpp"
#include "kiln/policy/policy.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::parallel {

namespace detail {
/// FNV-1a over bytes: the fingerprint ranks compare (model layout, parameters).
inline std::uint64_t fnv1a(const void* data, std::size_t bytes, std::uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/// A process group as the model's layers see it (nn::ReplicaGroup): SyncBatchNorm's collectives on
/// the model's memory (host for Mpi, the rank's GPU for Nccl).
template <class Group>
class ProcessGroupReplicas final : public nn::ReplicaGroup {
 public:
  explicit ProcessGroupReplicas(Group& group) : group_(group) {}
  int size() const override { return group_.size(); }
  int rank() const override { return group_.rank(); }
  void all_gather(const double* send, double* recv, index_t count, const std::string& what) override {
    group_.all_gather(send, recv, count, what);
  }
  void all_reduce_sum(double* data, index_t count, const std::string& what) override {
    group_.all_reduce_sum(data, count, what);
  }

 private:
  Group& group_;
};
}  // namespace detail

/// This rank's model of Net (input shape In, precision Prec, device D), kept identical to every other
/// rank's: rank 0's initial parameters are broadcast at construction, and every backward() leaves each
/// rank holding the gradients averaged over all ranks, so the same optimizer step keeps them identical.
/// Backend: Mpi (CPU models) or Nccl (CUDA models, one GPU per rank: the group's device(), which is
/// local_rank(), or 0 where each rank sees only its own GPU).
///
///   kiln::parallel::ProcessGroup<kiln::Mpi> group;                 // mpirun -np 2 ./train
///   kiln::parallel::DistributedDataParallel<Mlp, kiln::Shape<kiln::dyn, 13>, kiln::Mpi> ddp(group, 0);
///   kiln::optim::Adam opt(ddp, {.lr = 1e-3});        // or ddp.module(): the same parameters
///   // the loader takes a DistributedSampler{.world_size = group.size(), .rank = group.rank()}
///   auto pred = ddp.forward(x);
///   ddp.backward(loss.backward(pred, y));   // gradients averaged over the ranks
///   opt.step();
///
/// With each rank's loss the mean over its own batch, the averaged gradient is the mean gradient of the
/// global batch (every rank's batch has the same size under DistributedSampler). The gradients are
/// grouped in buckets (plan_buckets: 25 MiB, the first 1 MiB, last layers first); a bucket's average
/// starts as soon as backward has finished its layers and runs while the earlier layers compute.
/// With gradient accumulation, the micro-batches before the last run under no_sync().
/// The model's replica group is this group: its SyncBatchNorm layers (nn::convert_sync_batchnorm_t)
/// normalise training batches by the statistics of all ranks' batches together.
template <class Net, class In, class Backend, precision_policy Prec = Fp32, device_policy Dev = Cpu>
class DistributedDataParallel {
 public:
  using model_type = nn::Model<Net, In, Policy<Prec, Dev>>;
  using T = typename model_type::T;
  using M = typename model_type::M;
  using D = Dev;
  using precision = typename model_type::precision;
  using output_shape = typename model_type::output_shape;
  using group_type = ProcessGroup<Backend>;

  /// The model on this rank's device (CPU, or the group's GPU), initialised from `seed` and then
  /// overwritten with rank 0's parameters. Every rank must build the same network: otherwise every rank
  /// throws DistributedError naming the layouts.
  DistributedDataParallel(group_type& group, std::uint64_t seed = 0, const BucketOptions& buckets = {})
      : group_(group),
        model_(seed, model_device(group)),
        buckets_(plan_buckets(model_.named_parameters(), sizeof(M), buckets)),
        replicas_(group) {
    model_.set_replica_group(&replicas_);  // SyncBatchNorm layers reduce over the ranks
    check_same_model();
    broadcast_parameters();
    for (std::size_t b = 0; b < buckets_.size(); ++b)  // what a timeout names; built once, not every step
      labels_.push_back("averaging gradient bucket " + std::to_string(b) + " (" + buckets_[b].parameters.back() + " .. " +
                        buckets_[b].parameters.front() + ")");
    ready_ = [this](index_t offset) { on_ready(offset); };
  }
  /// Destroyed by an exception of this rank's own (a bad batch, a failed read) that the program may
  /// catch before it returns: the job is marked failed, so that this rank's exit aborts it and the other
  /// ranks end at once, not at their timeout in the next collective (torchrun's agent stops the others
  /// when one worker exits with an error).
  ~DistributedDataParallel() { group_.left_by_exception(uncaught_at_build_); }
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  /// The model itself: evaluate and checkpoint it (torch's ddp.module).
  model_type& module() { return model_; }
  const model_type& module() const { return model_; }
  /// The model's parameters, gradients and working copy, as torch's ddp.parameters() are the module's:
  /// an optimizer (and clip_grad_norm) takes the DDP object or its module() alike,
  /// `kiln::optim::Adam opt(ddp, {.lr = 1e-3})`.
  static constexpr bool has_working_copy = model_type::has_working_copy;
  auto& parameters() { return model_.parameters(); }
  const auto& parameters() const { return model_.parameters(); }
  auto& gradients() { return model_.gradients(); }
  const auto& gradients() const { return model_.gradients(); }
  /// The module's named_parameters() (its names, without torch's "module." prefix): what parameter
  /// groups take (`opt.add_param_group`).
  std::vector<nn::ParameterInfo> named_parameters() const { return model_.named_parameters(); }
  /// The module's first `layers` layers frozen (Model::freeze). A collective: every rank calls it with
  /// the same count (else every rank throws, naming the counts). The buckets that hold only their
  /// gradients (0 on every rank) are not averaged, as torch leaves them out of its buckets; a bucket
  /// that also holds a trainable parameter is.
  void freeze(std::ptrdiff_t layers) {
    const auto all = group_.all_gather(static_cast<std::int64_t>(layers), "comparing the frozen layers");
    const std::string differ = ranks_that_differ(all, all);
    group_.agree(differ.empty() ? std::string() :
                 "ddp.freeze: the ranks freeze different layers: rank 0 " + std::to_string(all[0]) +
                 ", and" + differ + "; freeze the same layers on every rank",
                 "comparing the frozen layers");
    model_.freeze(layers);
    frozen_ = model_.frozen_parameter_count();
  }
  void unfreeze() { freeze(0); }
  std::size_t frozen_layers() const { return model_.frozen_layers(); }
  index_t frozen_parameter_count() const { return model_.frozen_parameter_count(); }
  /// What an optimizer built on this object skips (the module's).
  index_t parameters_without_gradient() const { return model_.parameters_without_gradient(); }
  auto& working_parameters()
    requires has_working_copy
  {
    return model_.working_parameters();
  }
  group_type& group() { return group_; }
  int rank() const { return group_.rank(); }
  int world_size() const { return group_.size(); }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  /// How many buckets the last synchronised backward() started while layers were still left to
  /// differentiate (their averages overlapped the rest of backward); the others started at its end.
  std::size_t buckets_started_during_backward() const { return started_early_; }
  /// How many buckets the last synchronised backward() (or all_reduce_gradients()) left alone because
  /// they hold frozen layers' gradients only (freeze).
  std::size_t buckets_skipped_as_frozen() const { return skipped_frozen_; }

  /// model.forward(x); for a model with buffers (BatchNorm's running statistics), first rank 0's buffers
  /// are broadcast to every rank when the previous forward (or the construction) had gradients enabled
  /// outside no_sync(), as torch's DDP with broadcast_buffers=True: a collective, so every rank makes
  /// that forward (evaluate rank 0 alone through module(), in eval(): a training forward of a model with
  /// SyncBatchNorm is a collective even there, and would wait for the other ranks until the timeout).
  /// A synchronised forward followed by the module's own backward (`ddp.module().backward(dy)`, which
  /// averages nothing: the ranks' weights drift apart) is refused at the next forward, naming ddp.backward.
  Tensor<T, output_shape, D> forward(const Tensor<T, In, D>& x) {
    if (std::exchange(awaiting_backward_, false) && model_.backward_count() != backwards_at_forward_)
      throw Error("kiln::parallel::DistributedDataParallel::forward: the last forward's gradients went back "
                  "through ddp.module().backward(dy), which does not average them over the ranks (their "
                  "weights drift apart); call ddp.backward(dy), as torch's loss.backward() of a DDP forward "
                  "always averages (or make that forward under ddp.no_sync() to accumulate locally)");
    awaiting_backward_ = sync_ && model_.grad_enabled();
    backwards_at_forward_ = model_.backward_count();
    if constexpr (model_type::buffer_count > 0) {
      if (sync_buffers_)
        group_.broadcast(model_.buffers().data(), model_type::buffer_count, 0, "broadcasting rank 0's buffers");
      sync_buffers_ = model_.grad_enabled() && sync_;
    }
    backward_syncs_ = sync_;
    return model_.forward(x);
  }
  Tensor<T, output_shape, D> operator()(const Tensor<T, In, D>& x) { return forward(x); }
  /// Another tensor type where it fits, as Model::forward takes it (a static batch, float into a 16-bit model).
  template <class U, class S, class D2>
  Tensor<T, output_shape, D> forward(const Tensor<U, S, D2>& x) {
    return forward(nn::detail::as_model_input<T, In, D>(x));
  }
  template <class U, class S, class D2>
  Tensor<T, output_shape, D> operator()(const Tensor<U, S, D2>& x) {
    return forward(nn::detail::as_model_input<T, In, D>(x));
  }

  /// model.backward(dy), then the gradients are averaged over the ranks, bucket by bucket as backward
  /// reaches them, unless the forward before it was made under no_sync() (as torch, which prepares its
  /// reducer in forward): then only the local gradients accumulate.
  void backward(const Tensor<T, output_shape, D>& dy) {
    awaiting_backward_ = false;
    if (!backward_syncs_) {
      model_.backward(dy);
      return;
    }
    next_bucket_ = 0;
    started_early_ = 0;
    skipped_frozen_ = 0;
    try {
      model_.backward(dy, ready_);  // ready_ starts each bucket's average as its gradients are done
    } catch (...) {
      // Averages already started write into the gradients when they complete: finish them before the
      // caller (who may zero the gradients and go on) gets the error. Their own failure is secondary;
      // after a collective failed (a timeout: a peer stopped) the job ends, and waiting again would only
      // add another whole timeout before the error is seen.
      if (!group_.failed()) {
        try {
          group_.wait_all();
        } catch (...) {
        }
      }
      throw;
    }
    group_.wait_all();
    if (next_bucket_ != buckets_.size())
      throw Error("kiln::parallel::DistributedDataParallel: backward left " +
                  std::to_string(buckets_.size() - next_bucket_) + " gradient buckets unreduced");
    ++synced_backwards_;
  }
  /// Averages the gradients over the ranks now (after backward() calls made under no_sync(), or after
  /// gradients written by hand).
  void all_reduce_gradients() {
    skipped_frozen_ = 0;
    for (std::size_t b = 0; b < buckets_.size(); ++b) start(b);
    group_.wait_all();
    ++synced_backwards_;
  }

  /// A forward made within its scope is followed by a backward() that does not communicate (torch:
  /// `with ddp.no_sync():`, around forward and backward): the micro-batches of gradient accumulation
  /// before the last one. What counts is where the forward was made, as in torch.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& d) : d_(d), was_(d.sync_) { d_.sync_ = false; }
    ~NoSync() { d_.sync_ = was_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& d_;
    bool was_;
  };
  [[nodiscard("no_sync() is a scope guard: keep it, `auto guard = ddp.no_sync();`")]] NoSync no_sync() {
    return NoSync(*this);
  }
  void set_require_sync(bool on) { sync_ = on; }
  bool require_sync() const { return sync_; }

  void train(bool on = true) { model_.train(on); }
  void eval() { model_.eval(); }
  void zero_grad() { model_.zero_grad(); }

  /// Rank 0's parameters and buffers to every rank, as the constructor does (torch's DDP when it wraps a
  /// model): after weights were loaded on rank 0 alone (`ddp.module()`), before training. A collective.
  void broadcast_parameters() {
    group_.broadcast(model_.parameters().data(), model_type::parameter_count, 0, "broadcasting rank 0's parameters");
    if constexpr (model_type::buffer_count > 0)
      group_.broadcast(model_.buffers().data(), model_type::buffer_count, 0, "broadcasting rank 0's buffers");
  }

  /// Whether every rank holds the same parameters, bit for bit (a collective: call it on every rank).
  bool in_sync() {
    const std::uint64_t h = parameter_fingerprint();
    for (const auto x : group_.all_gather(static_cast<std::int64_t>(h), "comparing parameters"))
      if (static_cast<std::uint64_t>(x) != h) return false;
    return true;
  }

  /// Runs `write` on rank 0 only (a checkpoint), then every rank learns whether it succeeded: on
  /// success all return together (the file is whole before any rank reads it), on failure every rank
  /// throws. The same for `read` on every rank (loading a checkpoint): all succeed or all throw.
  /// First the ranks compare how many synchronised backward passes they made: ranks that stepped apart
  /// (a loader without a DistributedSampler) have already mixed their collectives up, and a checkpoint
  /// of what rank 0 computed since is not written (every rank throws DistributedError naming the counts).
  template <class F>
  void on_main_rank(F&& write, const std::string& what) {
    const auto all = group_.all_gather(static_cast<std::int64_t>(synced_backwards_), what);
    const std::string differ = ranks_that_differ(all, all);
    std::string stepped_apart;
    if (!differ.empty())
      stepped_apart = "the ranks made different numbers of synchronised backward passes: rank 0 " +
                      std::to_string(all[0]) + ", and" + differ +
                      "; their gradient averages did not pair up, so nothing was written (every rank must "
                      "run as many batches: a DistributedSampler gives them that)";
    group_.agree(stepped_apart, what);
    std::string problem;
    if (group_.is_main()) problem = attempt(write);
    group_.agree(problem, what);
  }
  template <class F>
  void on_every_rank(F&& read, const std::string& what) {
    group_.agree(attempt(read), what);
  }

 private:
  /// Where this rank's model lives: -1 (the CPU), or the GPU the NCCL group made current.
  static int model_device(group_type& group) {
    if constexpr (std::is_same_v<D, Cpu>) return -1;
    else if constexpr (requires { group.device(); }) return group.device();
    else return group.local_rank();
  }
  /// "" when `f` returned, else what it threw (never "": an exception without a message, or one that is
  /// not a std::exception, still fails, on every rank).
  template <class F>
  static std::string attempt(F& f) {
    try {
      f();
      return "";
    } catch (const std::exception& e) {
      const std::string what = e.what();
      return what.empty() ? std::string("an exception without a message") : what;
    } catch (...) {
      return "an exception that is not a std::exception";
    }
  }
  void on_ready(index_t offset) {
    while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= offset) {
      if (offset > 0) ++started_early_;  // offset 0: the first layer's gradients, backward's last
      start(next_bucket_++);
    }
    group_.progress();
  }
  void start(std::size_t b) {
    const Bucket& k = buckets_[b];
    // Frozen layers' gradients only: 0 on every rank (ddp.freeze agreed on it). Layers unfrozen since
    // through ddp.module() (on every rank, as the same program does) have gradients again: averaged.
    if (k.end <= std::min(frozen_, model_.frozen_parameter_count())) {
      ++skipped_frozen_;
      return;
    }
    group_.template start_average<M, D>(model_.gradients().data() + k.begin, k.size(), labels_[b]);
  }
  /// Parameter count, every parameter's and buffer's name and shape, the layers (the summary names
  /// each, with its arguments: BatchNorm2d and SyncBatchNorm differ, and would make different
  /// collectives) and the gradient buckets, hashed; all ranks must agree.
  void check_same_model() {
    std::uint64_t h = detail::fnv1a(&model_type::parameter_count, sizeof(index_t));
    if constexpr (requires { model_.net().summary(1); }) {
      const std::string layers = model_.summary();
      h = detail::fnv1a(layers.data(), layers.size(), h);
    }
    for (const auto& p : model_.named_parameters()) {
      h = detail::fnv1a(p.name.data(), p.name.size(), h);
      h = detail::fnv1a(p.shape.data(), p.shape.size() * sizeof(index_t), h);
    }
    for (const auto& b : model_.named_buffers()) {
      h = detail::fnv1a(b.name.data(), b.name.size(), h);
      h = detail::fnv1a(b.shape.data(), b.shape.size() * sizeof(index_t), h);
    }
    h = detail::fnv1a(&sizeof_m, sizeof sizeof_m, h);
    for (const auto& b : buckets_) {  // ranks with other BucketOptions would make collectives of other sizes
      h = detail::fnv1a(&b.begin, sizeof b.begin, h);
      h = detail::fnv1a(&b.end, sizeof b.end, h);
    }
    const auto all = group_.all_gather(static_cast<std::int64_t>(h), "comparing the model's layout");
    const auto counts = group_.all_gather(model_type::parameter_count, "comparing the model's size");
    const std::string differ = ranks_that_differ(all, counts);
    // Thrown through agree(): every rank throws it together, so the job ends cleanly (no MPI_Abort).
    group_.agree(differ.empty() ? std::string() :
                 "the ranks build different models: rank 0 has " + std::to_string(counts[0]) +
                 " parameters, and these ranks different layers, parameters, buffers or gradient buckets "
                 "(BucketOptions) (parameter count):" + differ,
                 "comparing the model's layout");
  }
  /// " rank r (shown[r])" for every rank r whose value in `all` is not rank 0's; "" when all agree.
  static std::string ranks_that_differ(const std::vector<std::int64_t>& all, const std::vector<std::int64_t>& shown) {
    std::string differ;
    for (std::size_t r = 1; r < all.size(); ++r)
      if (all[r] != all[0]) differ += " rank " + std::to_string(r) + " (" + std::to_string(shown[r]) + ")";
    return differ;
  }
  std::uint64_t parameter_fingerprint() const {
    const auto p = model_.parameters().to_vector();
    return detail::fnv1a(p.data(), p.size() * sizeof(M));
  }

  static constexpr std::size_t sizeof_m = sizeof(M);
  group_type& group_;
  model_type model_;
  std::vector<Bucket> buckets_;
  detail::ProcessGroupReplicas<group_type> replicas_;
  std::vector<std::string> labels_;  // per bucket, for error messages
  nn::GradientsReady ready_;
  std::size_t next_bucket_ = 0;
  std::size_t started_early_ = 0;
  std::size_t skipped_frozen_ = 0;
  index_t frozen_ = 0;  // the frozen parameters freeze() agreed on (ddp.module().freeze alone: none)
  std::int64_t synced_backwards_ = 0;  // backward()s that averaged, and all_reduce_gradients() calls
  bool awaiting_backward_ = false;          // the last forward was synchronised, with gradients (forward)
  std::uint64_t backwards_at_forward_ = 0;  // the module's backward_count() then
  int uncaught_at_build_ = std::uncaught_exceptions();  // (~DistributedDataParallel)
  bool sync_ = true;
  bool sync_buffers_ = true;  // whether the next forward broadcasts rank 0's buffers first
  bool backward_syncs_ = true;  // whether the last forward was made outside no_sync()
};

}  // namespace kiln::parallel
