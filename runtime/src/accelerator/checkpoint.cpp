// Checkpoints, as the Accelerator drives them (docs/checkpointing.md): save_state and load_state
// hand every prepared and registered part to state/ (checkpoint::TrainingRun) and do around it
// what concerns the rest of the run: the schedulers caught up and the trackers drained before a
// save, the trackers told of a load, `--resume`. And the model's weights out as safetensors.
#include <ATen/ops/empty.h>

#include <chrono>

#include <map>
#include <optional>
#include <set>

#include "accelerator/impl.h"
#include "check.h"
#include "comm/agree.h"
#include "ddp/units.h"
#include "state/training_run.h"
#include "xlaunch/env_vars.h"
#include "state/log_main.h"
#include "state/named_checkpoints.h"
#include "xlaunch/error.h"
#include "xlaunch/safetensors.h"

namespace xlaunch {

void Accelerator::save_state(const std::string& dir) { impl_->save_state(dir); }

void Accelerator::load_state(const std::string& dir) { impl_->load_state(dir); }

void Accelerator::wait_for_checkpoint() { impl_->wait_for_save(/*collective=*/true); }

bool Accelerator::maybe_load_state() {
  detail::AcceleratorImpl& a = *impl_;
  const std::string& what = a.options_.resume;
  if (what.empty()) return false;
  if (what == "latest") {
    // Whether there is any, decided on rank 0 (the directory need only be visible there).
    std::string count;
    if (a.rank_ == 0) count = std::to_string(checkpoint::list_named(a.options_.project_dir).size());
    if (a.world_ > 1) count = broadcast_string(*a.cpu_comm_, count);
    if (count == "0") {
      log_main(a.rank_, "resume: no checkpoint in " + checkpoint::checkpoints_dir(a.options_.project_dir) +
                            " yet; starting from the beginning");
      return false;
    }
  }
  a.load_state(what);
  return true;
}

namespace {

// save_model of a model whose parameters ZeRO stage 3 shards, streamed (issue 44): no rank ever
// holds more than one unit whole. Every rank walks the tensors in the order the writer asks for
// them (safetensors_write_order), gathering each sharded parameter's unit when it comes (and
// freeing the one before); rank 0 writes each as it comes. Should rank 0's writing fail, it walks
// on without writing, so that every rank makes the same gathers.
std::string save_streamed(const NamedTensors& tensors, const std::map<const c10::TensorImpl*, size_t>& unit_of,
                          Units& units, const std::string& dir, int64_t limit, int rank) {
  NamedTensors described;
  for (const auto& [name, t] : tensors)
    described.emplace_back(name, unit_of.count(t.unsafeGetTensorImpl())
                                     ? at::empty(t.sizes(), at::TensorOptions().dtype(t.scalar_type()).device(at::kMeta))
                                     : t);
  const std::vector<size_t> order = safetensors_write_order(described, limit);
  std::optional<size_t> whole;  // the unit gathered now
  size_t next = 0;              // into order
  const auto walk_to = [&](size_t index) {
    const auto unit = unit_of.find(tensors[index].second.unsafeGetTensorImpl());
    if (unit == unit_of.end() || whole == unit->second) return;
    if (whole) units.free_one(*whole);
    units.gather_one(unit->second);
    whole = unit->second;
  };
  std::string error;
  if (rank == 0) {
    // A gather that fails (communication) ends the save here as on the other ranks; only a failure
    // to write lets rank 0 walk on.
    bool gather_failed = false;
    try {
      save_safetensors_streamed(
          described,
          [&](size_t index) {
            XLAUNCH_ASSERT(next < order.size() && order[next] == index, "save_model asked for tensors out of order");
            ++next;
            try {
              walk_to(index);
            } catch (...) {
              gather_failed = true;
              throw;
            }
            return tensors[index].second.detach();
          },
          dir, limit);
    } catch (const std::exception& e) {
      if (gather_failed) throw;
      error = e.what();
    }
  }
  for (; next < order.size(); ++next) walk_to(order[next]);
  if (whole) units.free_one(*whole);
  return error;
}

}  // namespace

void Accelerator::save_module(const torch::nn::Module& module, const std::string& dir, const std::string& max_shard_size) {
  const int64_t limit = parse_size(max_shard_size);
  // At stage 3 a prepared model is streamed unit by unit; any other module is whole already, or
  // made whole (every unit) while it is written.
  detail::AcceleratorImpl::Model* sharded = nullptr;
  for (auto& m : impl_->models_)
    if (m.module.get() == &module && m.units) sharded = &m;
  std::map<const c10::TensorImpl*, size_t> unit_of;  // the sharded parameters' units
  if (sharded)
    for (size_t b = 0; b < sharded->units->plan().buckets.size(); ++b)
      for (size_t i : sharded->units->plan().buckets[b]) unit_of[sharded->reducer->params()[i].unsafeGetTensorImpl()] = b;
  // Streamed: units left whole (the root after a forward; every unit without
  // reshard_after_forward), perhaps in fsdp.param_dtype, are freed first (no communication), so
  // that the walk gathers each exactly, in the parameters' own dtype, which the description gives.
  std::optional<detail::AcceleratorImpl::WholeModels> whole;
  if (sharded)
    sharded->units->free_all(/*keep_changes=*/false);
  else
    whole.emplace(*impl_, /*keep_changes=*/false);
  // Tied weights (one tensor under two names) are written once, under the first name, as
  // Accelerate's clean_state_dict_for_safetensors does: safetensors refuses shared memory. A
  // sharded parameter's memory is not there until gathered: it is known by its tensor.
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::set<const void*> seen;
  const auto add = [&](const std::string& name, const at::Tensor& t) {
    const void* key = unit_of.count(t.unsafeGetTensorImpl()) ? static_cast<const void*>(t.unsafeGetTensorImpl()) : t.data_ptr();
    if (t.numel() == 0 || seen.insert(key).second) tensors.emplace_back(name, t);
  };
  for (const auto& p : module.named_parameters()) add(p.key(), p.value());
  for (const auto& b : module.named_buffers()) add(b.key(), b.value());
  std::string error;
  if (sharded) {
    error = save_streamed(tensors, unit_of, *sharded->units, dir, limit, impl_->rank_);
  } else if (impl_->rank_ == 0) {
    try {
      for (auto& [name, t] : tensors) t = t.detach();
      save_safetensors(tensors, dir, limit);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  const Agreement outcome = agree_on_error(*impl_->cpu_comm_, error);
  if (outcome.failed()) throw Error("save_model(" + dir + ") failed on rank 0: " + outcome.message);
}

std::vector<std::pair<std::string, at::Tensor>> Accelerator::module_state_dict(const torch::nn::Module& module) {
  const detail::AcceleratorImpl::WholeModels whole(*impl_, /*keep_changes=*/false);
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : module.named_parameters()) out.emplace_back(p.key(), p.value().detach().clone());
  for (const auto& b : module.named_buffers()) out.emplace_back(b.key(), b.value().detach().clone());
  return out;
}

namespace detail {

checkpoint::TrainingRun AcceleratorImpl::training_run() {
  checkpoint::TrainingRun run;
  run.comm = cpu_comm_.get();
  run.rank = rank_;
  run.world = world_;
  run.device = device_;
  run.ddp = options_.ddp;
  run.mixed_precision = options_.mixed_precision;
  for (const Model& m : models_) run.models.push_back({m.module.get(), m.reducer.get()});
  for (const auto& o : optimizers_) run.optimizers.push_back({o->inner_, o->sharded_.get(), &o->steps_});
  for (const auto& s : schedulers_) run.schedulers.push_back({s->inner_, &s->followed_});
  for (const auto& c : custom_) run.custom.push_back(c.get());
  run.loaders = &loaders_;
  run.scaler = scaler_.get();
  run.items = items_.get();
  run.step = &step_;
  run.micro_step = &micro_step_;
  return run;
}

void AcceleratorImpl::save_state(const std::string& dir) {
  if (micro_step_ % accumulation_steps_ != 0)
    log_main(rank_, "save_state: called in the middle of gradient accumulation (micro-step " +
                    std::to_string(micro_step_) + ", a sync every " + std::to_string(accumulation_steps_) +
                    "); the gradients accumulated so far are not saved. Save after an optimizer step for an exact resume");
  // A save inside the loop holds the schedule of the step it saves (PreparedScheduler).
  for (auto& s : schedulers_) s->catch_up();
  // The logs reach the step saved before the checkpoint does (docs/tracking.md).
  drain_trackers();
  wait_for_save(/*collective=*/true);  // one save at a time
  // At stage 3 every rank saves its own shard (state/model_shards.h): nothing is gathered.
  if (!options_.checkpoint_async) {
    checkpoint::save_run(dir, training_run());
    return;
  }
  const int64_t timeout = env::get_int(env::kTimeoutS);
  background_save_ = checkpoint::save_run_async(dir, training_run(), timeout > 0 ? static_cast<double>(timeout) : 3600.0);
  if (!background_save_)
    log_main(rank_, "save_state(" + dir + "): checkpoint.async, but not every rank sees the directory (no shared file "
                    "system), so it was written synchronously through rank 0");
}

AcceleratorImpl::WholeModels::WholeModels(AcceleratorImpl& a, bool keep_changes) : a_(a), keep_changes_(keep_changes) {
  for (Model& m : a_.models_)
    if (m.units) m.units->gather_all();
}

AcceleratorImpl::WholeModels::~WholeModels() {
  for (Model& m : a_.models_)
    if (m.units) m.units->free_all(keep_changes_);
}

void AcceleratorImpl::load_state(const std::string& dir) {
  wait_for_save(/*collective=*/true);  // a checkpoint being written is complete before anything is read
  const auto t0 = std::chrono::steady_clock::now();
  checkpoint::TrainingRun run = training_run();
  std::string loaded;
  // At stage 3 each rank loads into its shards (state/model_shards.h), nothing gathered; a unit
  // left whole (the root after a forward) would hold the old values: freed first.
  for (Model& m : models_)
    if (m.units) m.units->free_all(/*keep_changes=*/false);
  loaded = checkpoint::load_run(dir, options_.project_dir, run);
  boundary_pending_ = false;
  track_loaded(loaded);
  load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace detail
}  // namespace xlaunch
