// The learning rate over epochs (--lr-step-size, --lr-gamma): torch's StepLR(opt, step_size, gamma),
// stepped after every epoch's optimizer steps, as the seeds' recipe does:
//   scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30, gamma=0.1)
//   for epoch in range(num_epochs): train(...); scheduler.step()
#pragma once
#include <cmath>
#include <optional>
#include <string>

#include <kiln/optim/scheduler.hpp>

#include "checkpoint.hpp"
#include "cli.hpp"

namespace examples {

/// StepLR over `opt` when o.lr_step_size is set, else nothing (the lr stays). The lr of epoch e is
/// base · gamma^(e / step_size). The base is the optimizer's lr in a fresh run (--lr); a resumed run takes
/// the checkpoint's (metadata lr_schedule.base_lr) and goes on as if it had never stopped, unless --lr is
/// given: --lr is then the lr of the epoch it resumes at, and the schedule decays from there (as setting
/// torch's param_groups' lr after loading does). A checkpoint without a base (written before kiln recorded
/// it) starts the schedule from its lr the same way.
template <class Optimizer>
class EpochSchedule {
 public:
  EpochSchedule(const TrainOptions& o, Optimizer& opt, const Resumed& resumed) {
    if (o.lr_step_size <= 0) return;
    double base = opt.lr();  // --lr, or a resumed run's (resume_training: --lr replaces the checkpoint's)
    if (resumed.epochs > 0) {
      if (!o.lr_given && std::isfinite(resumed.schedule_base_lr))
        base = resumed.schedule_base_lr;
      else
        base = opt.lr() / std::pow(o.lr_gamma, static_cast<double>(resumed.epochs / o.lr_step_size));
    }
    opt.set_lr(base);
    sched_.emplace(opt, o.lr_step_size, o.lr_gamma);  // base_lr: the optimizer's lr now
    sched_->set_last_epoch(resumed.epochs);           // the lr of the epoch training starts at
  }
  /// After an epoch's optimizer steps: the next epoch's lr.
  void step() {
    if (sched_) sched_->step();
  }
  /// What a checkpoint records to resume it: the base lr, in the fewest digits that read back exactly.
  ExtraMetadata metadata() const {
    if (!sched_) return {};
    return {{schedule_base_key, shortest(sched_->base_lr())}};
  }

 private:
  std::optional<kiln::optim::StepLR<Optimizer>> sched_;
};

/// The optimizer and schedule for the run's line: "Adam(lr=0.01)", "Adam(lr=0.01, weight_decay=0.0001),
/// StepLR(step_size=30, gamma=0.1)".
template <class Optimizer>
std::string describe_optimizer(const TrainOptions& o, const Optimizer& opt) {
  std::string s = "Adam(lr=" + shortest(static_cast<double>(opt.lr()));
  if (o.weight_decay != 0) s += ", weight_decay=" + shortest(o.weight_decay);
  s += ")";
  if (o.lr_step_size > 0)
    s += ", StepLR(step_size=" + std::to_string(o.lr_step_size) + ", gamma=" + shortest(o.lr_gamma) + ")";
  return s;
}

}  // namespace examples
