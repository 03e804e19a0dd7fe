// What carries a training job beyond the loop itself (docs/checkpointing.md): prepared learning-rate
// schedulers, the user's objects registered for checkpointing, named and rotated checkpoints,
// automatic saves, the step boundary, and stopping for a preemption.
//
// The step boundary is where everything of one optimizer step has happened, on every rank alike:
// the first prepared loader's next batch (or its epoch's end) after an optimizer step, or, for a
// loop without a prepared loader, the next backward. There the user's own updates that follow
// opt.step() (scheduler.step(), an EMA, counters) are done, so a checkpoint written there resumes
// bitwise, and the ranks reach it in the same iteration.
#include <ATen/ops/full.h>

#include <chrono>
#include <iostream>
#include <set>

#include "comm/agree.h"
#include "state/log_main.h"
#include "state/named_checkpoints.h"
#include "watch/board.h"
#include "watch/preemption.h"
#include "xlaunch/accelerator.h"
#include "xlaunch/error.h"
#include "xlaunch/process_state.h"
#include "xlaunch/safetensors.h"

namespace xlaunch {
namespace {

// When libxlaunch was loaded: the start of the process, near enough, for "how long did a restart
// take until it trained again".
const std::chrono::steady_clock::time_point kLoaded = std::chrono::steady_clock::now();

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string fixed(double x, int digits = 1) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

}  // namespace

// ---- schedulers ----------------------------------------------------------------------------

PreparedScheduler::PreparedScheduler(Accelerator* acc, Scheduler* inner, std::unique_ptr<Scheduler> owned,
                                     const PreparedOptimizer* opt)
    : acc_(acc), inner_(inner), owned_(std::move(owned)), opt_(opt), followed_(opt->steps_taken()) {}

void PreparedScheduler::catch_up() {
  if (inner_->takes_metric()) return;
  while (followed_ < opt_->steps_taken()) {
    inner_->step();
    ++followed_;
  }
}

void PreparedScheduler::step() {
  if (inner_->takes_metric())
    throw UsageError("the prepared " + inner_->name() + " scheduler advances on a metric: call step(metric), "
                     "e.g. with the validation loss");
  catch_up();
}

void PreparedScheduler::step(double metric) {
  if (!inner_->takes_metric()) {
    inner_->step(metric);  // throws the scheduler's own message
    return;
  }
  // Every rank must set the same learning rate: they decide on the same (mean) metric.
  at::Tensor m = at::full({1}, metric, at::kDouble);
  if (acc_->num_processes() > 1) m = acc_->reduce(m, ReduceOp::Avg);
  inner_->step(m.item<double>());
}

PreparedOptimizer& Accelerator::only_optimizer(const char* what) {
  if (optimizers_.size() == 1) return *optimizers_.front();
  throw UsageError(std::string("acc.prepare(") + what + "): " +
                   (optimizers_.empty() ? "prepare its optimizer first (acc.prepare(optimizer))"
                                        : std::to_string(optimizers_.size()) + " optimizers are prepared; say which "
                                          "this scheduler drives: acc.prepare(scheduler, prepared_optimizer)"));
}

PreparedScheduler& Accelerator::prepare_scheduler(Scheduler* s, std::unique_ptr<Scheduler> owned,
                                                  PreparedOptimizer* opt) {
  if (!opt) {
    for (auto& o : optimizers_)
      if (&o->inner() == &s->optimizer()) opt = o.get();
    if (!opt)
      throw UsageError("acc.prepare(scheduler): its optimizer is not a prepared one; acc.prepare(optimizer) first, "
                       "and build the scheduler over that same optimizer");
  }
  schedulers_.push_back(std::make_unique<PreparedScheduler>(this, s, std::move(owned), opt));
  return *schedulers_.back();
}

PreparedScheduler& Accelerator::prepare(Scheduler& scheduler) { return prepare_scheduler(&scheduler, nullptr, nullptr); }

PreparedScheduler& Accelerator::prepare(torch::optim::LRScheduler& scheduler) {
  return prepare(scheduler, only_optimizer("LRScheduler"));
}

PreparedScheduler& Accelerator::prepare(torch::optim::LRScheduler& scheduler, PreparedOptimizer& optimizer) {
  auto owned = adapt(scheduler, optimizer.inner());
  Scheduler* s = owned.get();
  return prepare_scheduler(s, std::move(owned), &optimizer);
}

PreparedScheduler& Accelerator::prepare(torch::optim::ReduceLROnPlateauScheduler& scheduler) {
  return prepare(scheduler, only_optimizer("ReduceLROnPlateauScheduler"));
}

PreparedScheduler& Accelerator::prepare(torch::optim::ReduceLROnPlateauScheduler& scheduler,
                                        PreparedOptimizer& optimizer) {
  auto owned = adapt(scheduler, optimizer.inner());
  Scheduler* s = owned.get();
  return prepare_scheduler(s, std::move(owned), &optimizer);
}

void Accelerator::register_checkpoint_object(std::unique_ptr<CheckpointObject> obj) {
  custom_.push_back(std::move(obj));
}

// ---- the step boundary ---------------------------------------------------------------------

bool Accelerator::preemption_requested() const { return preempt::requested(); }

bool Accelerator::preemption_agreed() {
  // The bit every rank put on the gradient allreduce (Reducer::set_control_bit): all ranks see
  // the same value after the same synced backward.
  if (!models_.empty()) {
    for (const auto& m : models_)
      if (m.reducer->control_raised_at() >= 0) return true;
    return false;
  }
  // No prepared model, so no gradient allreduce to ride on: one vote per step boundary.
  if (world_ == 1) return preempt::requested();
  at::Tensor flag = at::full({1}, preempt::requested() ? 1 : 0, at::kInt);
  cpu_comm_->allreduce(flag, ReduceOp::Max);
  return flag.item<int>() != 0;
}

void Accelerator::at_step_boundary() {
  if (!boundary_pending_) return;
  boundary_pending_ = false;
  if (preemption_agreed()) stop_for_preemption();
  track_step_boundary();
  const int64_t every = options_.checkpoint_every_n_steps;
  if (every > 0 && step_ > 0 && step_ % every == 0 && step_ != last_saved_step_) save_named("every_n_steps");
}

void Accelerator::at_epoch_end() {
  at_step_boundary();
  if (loader_joins_) join_now();  // the ranks whose data ended first wait here, taking part, for the others
  if (options_.checkpoint_every_epoch && step_ != last_saved_step_) save_named("every_epoch");
}

void Accelerator::stop_for_preemption() {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t signal_ns = preempt::requested_at_ns();
  log_main(rank_, "preemption: SIGUSR1 reached the job; every rank stops at step " + std::to_string(step_) +
                      (options_.project_dir.empty() ? "" : " and saves a checkpoint"));
  std::string saved = "no checkpoint was saved: project_dir is not set (set it to keep a preempted job's work)";
  if (!options_.project_dir.empty()) {
    save_named("preemption");
    saved = "checkpoint " + checkpoint::named_path(options_.project_dir, step_) + " saved in " +
            fixed(seconds_since(t0)) + " s";
  }
  if (rank_ == 0) {
    std::string after;
    if (signal_ns > 0) {
      const double since = static_cast<double>(watch::now_ns() - signal_ns) / 1e9;
      after = ", " + fixed(since) + " s after the signal reached rank 0 (the grace period the cluster gives must be "
              "longer than that)";
    }
    log_main(rank_, "preempted at step " + std::to_string(step_) + ": " + saved + after + "; exiting with status " +
                        std::to_string(kPreemptedExitCode) + " (continue with `xlaunch run --resume`)");
  }
  drain_trackers();  // what the trackers hold (bounded), before the process ends without destructors
  ProcessState::end_process(kPreemptedExitCode);
}

// ---- named checkpoints ---------------------------------------------------------------------

void Accelerator::save_named(const char* why) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string dir = checkpoint::named_path(options_.project_dir, step_);
  save_state(dir);
  last_saved_step_ = step_;
  if (rank_ != 0) return;
  std::string note;
  try {
    for (const std::string& gone : checkpoint::rotate(options_.project_dir, options_.checkpoint_total_limit, dir))
      note += (note.empty() ? "; removed " : ", ") + gone;
  } catch (const std::exception& e) {
    note = "; warning: could not remove an old checkpoint (" + std::string(e.what()) + "): training goes on";
  }
  log_main(rank_, "checkpoint " + dir + " saved (" + why + ", step " + std::to_string(step_) + ", " +
                      fixed(seconds_since(t0), 2) + " s)" + note);
}

void Accelerator::save_state() { save_named("save_state"); }

void Accelerator::announce_first_step_after_load() {
  log_main(rank_, "first optimizer step after load_state done (step " + std::to_string(step_) + "), " +
                      fixed(seconds_since(kLoaded)) + " s after the process started; load_state took " +
                      fixed(load_seconds_, 2) + " s");
  load_seconds_ = -1;
}

bool Accelerator::maybe_load_state() {
  const std::string& what = options_.resume;
  if (what.empty()) return false;
  if (what == "latest") {
    // Whether there is any, decided on rank 0 (the directory need only be visible there).
    std::string count;
    if (rank_ == 0) count = std::to_string(checkpoint::list_named(options_.project_dir).size());
    if (world_ > 1) count = broadcast_string(*cpu_comm_, count);
    if (count == "0") {
      log_main(rank_, "resume: no checkpoint in " + checkpoint::checkpoints_dir(options_.project_dir) +
                          " yet; starting from the beginning");
      return false;
    }
  }
  load_state(what);
  return true;
}

// ---- weights out ---------------------------------------------------------------------------

void Accelerator::save_module(const torch::nn::Module& module, const std::string& dir, const std::string& max_shard_size) {
  const int64_t limit = parse_size(max_shard_size);
  std::string error;
  if (rank_ == 0) {
    try {
      // Tied weights (one tensor under two names) are written once, under the first name, as
      // Accelerate's clean_state_dict_for_safetensors does: safetensors refuses shared memory.
      std::vector<std::pair<std::string, at::Tensor>> tensors;
      std::set<const void*> seen;
      const auto add = [&](const std::string& name, const at::Tensor& t) {
        if (t.numel() == 0 || seen.insert(t.data_ptr()).second) tensors.emplace_back(name, t.detach());
      };
      for (const auto& p : module.named_parameters()) add(p.key(), p.value());
      for (const auto& b : module.named_buffers()) add(b.key(), b.value());
      save_safetensors(tensors, dir, limit);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  const Agreement outcome = agree_on_error(*cpu_comm_, error);
  if (outcome.failed()) throw Error("save_model(" + dir + ") failed on rank 0: " + outcome.message);
}

}  // namespace xlaunch
