// The Accelerator's experiment tracking (init_trackers, log, end_training: docs/tracking.md) and
// its hooks into the training step, over track/run_tracking.h: the utilization at the step
// boundary, histograms after an optimizer step, the resumption after load_state.
#include "accelerator/impl.h"
#include "track/run_tracking.h"
#include "xlaunch/error.h"

namespace xlaunch {

void Accelerator::init_trackers(const std::string& project_name, const HParams& config) {
  detail::AcceleratorImpl& a = *impl_;
  if (a.tracking_) throw UsageError("init_trackers was called twice; call it once, before training");
  track::TrackingSetup setup;
  setup.log_with = a.options_.log_with;
  setup.project_dir = a.options_.project_dir;
  setup.report_interval = a.options_.report_interval;
  setup.log_histograms_every_n_steps = a.options_.log_histograms_every_n_steps;
  setup.cuda = a.device_.is_cuda();
  setup.step = a.step_;
  setup.loaded_from = a.loaded_from_;
  a.tracking_ = track::start_tracking(*a.cpu_comm_, setup, project_name, config);
}

bool Accelerator::trackers_active() const { return impl_->tracking_ != nullptr; }

void Accelerator::log(const LogValues& values, int64_t step, LogReduce reduce) {
  detail::AcceleratorImpl& a = *impl_;
  if (step < 0) step = a.step_;
  if (!a.tracking_) return;  // init_trackers said why, or was not called (Accelerate's log does nothing either)
  const LogValues out = reduce != LogReduce::None && a.world_ > 1
                            ? track::reduce_logged(*a.cpu_comm_, values, step, reduce, a.uneven_)
                            : values;
  if (!a.tracking_->tracker) return;
  std::vector<track::Scalar> scalars;
  scalars.reserve(out.size());
  for (const auto& [name, v] : out) scalars.push_back({name, v});
  a.tracking_->tracker->log(step, scalars);
}

void Accelerator::end_training() {
  if (impl_->tracking_ && impl_->tracking_->tracker) impl_->tracking_->tracker->end();
}

namespace detail {

void AcceleratorImpl::track_step_boundary() {
  if (tracking_) track::report_utilization(*tracking_, *cpu_comm_, step_, options_.report_interval, device_.is_cuda());
}

void AcceleratorImpl::track_optimizer_step() {
  if (!tracking_) return;
  std::vector<const torch::nn::Module*> modules;
  for (const Model& m : models_) modules.push_back(m.module.get());
  track::log_histograms(*tracking_, step_, options_.log_histograms_every_n_steps, modules);
}

void AcceleratorImpl::drain_trackers() {
  if (tracking_) track::drain(*tracking_);
}

void AcceleratorImpl::track_loaded(const std::string& checkpoint) {
  loaded_from_ = checkpoint;
  if (tracking_) track::resumed(*tracking_, step_, checkpoint);
}

}  // namespace detail
}  // namespace xlaunch
