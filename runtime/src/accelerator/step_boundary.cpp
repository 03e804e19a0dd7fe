// The step boundary and what acts there (docs/checkpointing.md): a preemption agreed by every rank
// stops the job with a checkpoint, named checkpoints are saved (every_n_steps, every_epoch) and
// rotated; and the first optimizer step after load_state says how long the restart took.
//
// The step boundary is where everything of one optimizer step has happened, on every rank alike:
// the first prepared loader's next batch (or its epoch's end) after an optimizer step, or, for a
// loop without a prepared loader, the next backward. There the user's own updates that follow
// opt.step() (scheduler.step(), an EMA, counters) are done, so a checkpoint written there resumes
// bitwise, and the ranks reach it in the same iteration.
#include <ATen/ops/full.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <utility>

#include "accelerator/impl.h"
#include "comm/agree.h"
#include "state/training_run.h"
#include "xlaunch/error.h"
#include "state/log_main.h"
#include "state/named_checkpoints.h"
#include "watch/board.h"
#include "watch/preemption.h"
#include "xlaunch/process_state.h"

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

bool Accelerator::preemption_requested() const { return preempt::requested(); }

void Accelerator::save_state() { impl_->save_named("save_state"); }

namespace detail {

bool AcceleratorImpl::preemption_agreed() {
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

void AcceleratorImpl::at_step_boundary() {
  if (!boundary_pending_) return;
  boundary_pending_ = false;
  if (preemption_agreed()) stop_for_preemption();
  track_step_boundary();
  const int64_t every = options_.checkpoint_every_n_steps;
  if (every > 0 && step_ > 0 && step_ % every == 0 && step_ != last_saved_step_) save_named("every_n_steps");
}

void AcceleratorImpl::at_epoch_end() {
  at_step_boundary();
  if (loader_joins_) join_now();  // the ranks whose data ended first wait here, taking part, for the others
  if (options_.checkpoint_every_epoch && step_ != last_saved_step_) save_named("every_epoch");
}

void AcceleratorImpl::stop_for_preemption() {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t signal_ns = preempt::requested_at_ns();
  log_main(rank_, "preemption: SIGUSR1 reached the job; every rank stops at step " + std::to_string(step_) +
                      (options_.project_dir.empty() ? "" : " and saves a checkpoint"));
  std::string saved = "no checkpoint was saved: project_dir is not set (set it to keep a preempted job's work)";
  if (!options_.project_dir.empty()) {
    save_named("preemption");
    wait_for_save(/*collective=*/true);  // the process ends next: a background save completes first
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

void AcceleratorImpl::save_named(const char* why) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string dir = checkpoint::named_path(options_.project_dir, step_);
  save_state(dir);
  last_saved_step_ = step_;
  if (background_save_) {
    // Rotated once it is complete: until then the newest complete checkpoint is an older one.
    rotate_after_save_ = dir;
    log_main(rank_, "checkpoint " + dir + " being written in the background (" + why + ", step " +
                        std::to_string(step_) + "; training held " + fixed(background_save_->blocked_s(), 3) + " s)");
    return;
  }
  rotate_named(dir, why, seconds_since(t0), "");
}

void AcceleratorImpl::rotate_named(const std::string& newest, const char* why, double seconds, const std::string& how) {
  if (rank_ != 0) return;
  std::string note;
  try {
    for (const std::string& gone : checkpoint::rotate(options_.project_dir, options_.checkpoint_total_limit, newest))
      note += (note.empty() ? "; removed " : ", ") + gone;
  } catch (const std::exception& e) {
    note = "; warning: could not remove an old checkpoint (" + std::string(e.what()) + "): training goes on";
  }
  if (how.empty())
    log_main(rank_, "checkpoint " + newest + " saved (" + why + ", step " + std::to_string(step_) + ", " +
                        fixed(seconds, 2) + " s)" + note);
  else
    log_main(rank_, "checkpoint " + newest + " " + how + note);
}

void AcceleratorImpl::wait_for_save(bool collective) {
  if (!background_save_) return;
  std::unique_ptr<checkpoint::BackgroundSave> save = std::move(background_save_);
  const std::string newest = std::exchange(rotate_after_save_, std::string());
  const std::string error = save->wait();
  if (collective) {
    const Agreement outcome = agree_on_error(*cpu_comm_, error);
    if (outcome.failed())
      throw Error("save_state(" + save->dir() + ") in the background failed on rank " + std::to_string(outcome.rank) +
                  ": " + outcome.message + ". The previous checkpoint is kept");
  } else if (!error.empty()) {
    std::cerr << "[xlaunch] rank " << rank_ << ": save_state(" << save->dir() << ") in the background failed: " << error
              << ". The previous checkpoint is kept" << std::endl;
    return;
  }
  const std::string how = "written in the background in " + fixed(save->written_s(), 2) + " s; training was held " +
                          fixed(save->blocked_s(), 3) + " s";
  if (!newest.empty()) rotate_named(newest, "", 0, how);
  else log_main(rank_, "save_state(" + save->dir() + "): " + how);
}

void AcceleratorImpl::announce_first_step_after_load() {
  log_main(rank_, "first optimizer step after load_state done (step " + std::to_string(step_) + "), " +
                      fixed(seconds_since(kLoaded)) + " s after the process started; load_state took " +
                      fixed(load_seconds_, 2) + " s");
  load_seconds_ = -1;
}

}  // namespace detail
}  // namespace xlaunch
