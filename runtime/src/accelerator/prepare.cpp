// Accelerator::prepare of a model, an optimizer and a loader: the ranks agree on what they hold
// before the first collective of their own (STYLE.md 5), rank 0's weights reach every rank, and
// each model gets its gradient reducer. And what a prepared model's forward does first
// (ForwardScope). Schedulers: schedulers.cpp.
#include <ATen/autocast_mode.h>
#include <ATen/ops/cat.h>

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>

#include "accelerator/impl.h"
#include "comm/agree.h"
#include "comm/flat.h"
#include "ddp/zero_optimizer.h"
#include "nn/prepare_sync_batchnorm.h"
#include "optim/fused_step.h"
#include "profile/step_clock.h"
#include "state/log_main.h"
#include "watch/watchdog.h"
#include "xlaunch/autocast.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/error.h"
#include "xlaunch/process_state.h"
#include "xlaunch/wrap_policy.h"
#include "xlaunch/zero_stages.h"

namespace xlaunch {
namespace {

std::string describe_params(const torch::nn::Module& m) {
  std::ostringstream os;
  for (const auto& item : m.named_parameters()) {
    os << "parameter '" << item.key() << "' shape " << item.value().sizes() << " "
       << at::toString(item.value().scalar_type()) << (item.value().requires_grad() ? "" : " frozen") << "\n";
  }
  for (const auto& item : m.named_buffers())
    os << "buffer '" << item.key() << "' shape " << item.value().sizes() << " "
       << at::toString(item.value().scalar_type()) << "\n";
  return os.str();
}

// Flattens same-dtype tensors into buffers of at most about `chunk_bytes` (a larger tensor alone),
// broadcasts each from `root`, and copies back: the copy in flight never holds the whole model.
void broadcast_coalesced(Communicator& comm, const std::vector<at::Tensor>& tensors, int root = 0,
                         int64_t chunk_bytes = int64_t{25} << 20) {
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  for (auto& [dtype, group] : by_dtype) {
    std::vector<at::Tensor> part, flat;
    int64_t bytes = 0;
    for (size_t i = 0; i < group.size(); ++i) {
      part.push_back(group[i]);
      flat.push_back(group[i].detach().reshape({-1}));
      bytes += static_cast<int64_t>(group[i].nbytes());
      if (bytes < chunk_bytes && i + 1 < group.size()) continue;
      at::Tensor buffer = at::cat(flat);
      comm.broadcast(buffer, root);
      unflatten_into(buffer, part);
      part.clear();
      flat.clear();
      bytes = 0;
    }
  }
}

// A dataset already sharded per rank, with even batches: every rank must run the same number of
// batches, or the ranks' collectives would not match. Collective; every rank reaches the same verdict.
void check_shards_even(Communicator& comm, const Loader& loader) {
  if (!loader.options().already_sharded || !loader.options().even_batches || comm.size() == 1) return;
  const std::vector<std::string> counts = comm.allgather_strings(std::to_string(loader.num_batches()));
  if (std::all_of(counts.begin(), counts.end(), [&](const std::string& c) { return c == counts.front(); })) return;
  std::string each;
  for (size_t r = 0; r < counts.size(); ++r) each += (r ? ", rank " : "rank ") + std::to_string(r) + ": " + counts[r];
  throw UsageError("acc.prepare(loader): the loader's dataset is already_sharded and the ranks' shards make "
                   "different numbers of batches (" + each + "), but even_batches is true, so the ranks would wait "
                   "for each other's missing steps. Set even_batches false (loader.even_batches: false in the "
                   "config, or LoaderOptions::even_batches) so that ranks whose data ends first join the others, "
                   "or give every rank the same number of batches");
}

}  // namespace

size_t Accelerator::prepare_module(std::shared_ptr<torch::nn::Module> module) {
  return impl_->prepare_module(std::move(module));
}

PreparedOptimizer& Accelerator::prepare(torch::optim::Optimizer& optimizer) {
  detail::AcceleratorImpl& a = *impl_;
  std::shared_ptr<ShardedOptimizer> sharded;
  if (shards_optimizer_state(a.options_.ddp.zero_stage)) {
    std::vector<ShardedOptimizer::Model> models;
    for (size_t i = 0; i < a.models_.size(); ++i) models.push_back({a.models_[i].reducer.get(), i});
    sharded = std::make_shared<ShardedOptimizer>(optimizer, std::move(models));
  }
  // optimizer.fused: true fails here for what can be known before a gradient exists (the type, the
  // parameters' device, dtype and layout); the step checks the rest.
  if (optim::parse_fused_mode(a.options_.optimizer_fused) == optim::FusedMode::On) {
    const std::string why = optim::why_not_fused(optimizer);
    if (!why.empty()) throw UsageError(optim::fused_refusal(a.optimizers_.size(), optimizer, why));
  }
  a.optimizers_.push_back(std::make_unique<PreparedOptimizer>(&a, &optimizer, std::move(sharded), a.optimizers_.size()));
  return *a.optimizers_.back();
}

Loader& Accelerator::prepare(const Loader& loader) { return impl_->prepare_loader(loader); }

ForwardScope::ForwardScope(Accelerator& acc, size_t model_id)
    : phase_(std::make_shared<profile::PhaseScope>(profile::kForward)) {
  watch::mark_alive(status::Phase::Forward);
  detail::AcceleratorImpl& a = *acc.impl_;
  a.broadcast_buffers(model_id);
  Units* units = a.models_.at(model_id).units.get();
  if (units) units->start_forward();
  if (a.mixed_precision_ == MixedPrecision::No) return;
  if (!units) {
    autocast_ = std::make_shared<AutocastGuard>(a.device_.type(), a.mixed_precision_);
    return;
  }
  // Stage 3: autocast keeps no cast copies of the parameters, which would hold every unit's weights
  // (in the lower precision) for the whole forward, past each unit's free.
  struct WithoutCastCache {
    bool cache = at::autocast::is_autocast_cache_enabled();
    AutocastGuard guard;
    WithoutCastCache(c10::DeviceType d, MixedPrecision mp) : guard(d, mp) { at::autocast::set_autocast_cache_enabled(false); }
    ~WithoutCastCache() { at::autocast::set_autocast_cache_enabled(cache); }
  };
  autocast_ = std::make_shared<WithoutCastCache>(a.device_.type(), a.mixed_precision_);
}

ForwardScope::~ForwardScope() = default;

namespace detail {

void AcceleratorImpl::check_same_everywhere(const std::string& what, const std::string& mine) {
  const Agreement agreed = agree_on_rank0(*cpu_comm_, mine);
  if (!agreed.failed()) return;
  throw UsageError("acc.prepare: the ranks do not hold the same " + what + ", so their collectives would not match. "
                   "First difference: " + agreed.message + ". (This is " + where_am_i() + ".) Build the same model "
                   "with the same settings on every rank (same constructor arguments, same XLAUNCH_* environment).");
}

size_t AcceleratorImpl::prepare_module(std::shared_ptr<torch::nn::Module> module) {
  if (!module) throw UsageError("acc.prepare: the model is null");
  prepare_sync_batchnorm(*module, options_.sync_batchnorm, rank_, [this] { return communicator(device_); });
  module->to(device_);
  std::vector<at::Tensor> params, state;
  std::vector<std::string> names;
  for (const auto& item : module->named_parameters()) {
    state.push_back(item.value());
    if (!item.value().requires_grad()) continue;
    params.push_back(item.value());
    names.push_back(item.key());
  }
  for (const auto& item : module->named_buffers()) state.push_back(item.value());
  if (params.empty()) throw UsageError("acc.prepare: the model has no trainable parameters");
  // Agree on the model and the settings before building the buckets, whose allocation may itself
  // be collective (shared memory).
  std::ostringstream settings;
  settings << "mixed_precision " << options_.mixed_precision << "\n" << env::key_of(env::kGradAccumSteps) << " "
           << accumulation_steps_ << "\nsync_with_dataloader " << options_.sync_with_dataloader
           << "\nfind_unused_parameters "
           << options_.ddp.find_unused_parameters << "\nbroadcast_buffers " << options_.broadcast_buffers
           << "\nsync_batchnorm " << options_.sync_batchnorm
           << "\nbucket_cap_mb " << options_.ddp.bucket_cap_mb << "\nfirst_bucket_bytes "
           << options_.ddp.first_bucket_bytes << "\ncpu_allreduce " << options_.cpu_allreduce << "\ncomm_hook "
           << options_.ddp.comm_hook << "\npowersgd_rank " << options_.ddp.powersgd_rank << "\npowersgd_start_step "
           << options_.ddp.powersgd_start_step << "\nzero_stage " << options_.ddp.zero_stage << "\nshard_group "
           << options_.ddp.shard_group << "\nfsdp.prefetch "
           << options_.ddp.fsdp_prefetch << "\nfsdp.reshard_after_forward " << options_.ddp.reshard_after_forward
           << "\nfsdp.activation_checkpointing " << options_.ddp.fsdp_activation_checkpointing << "\nfsdp.wrap "
           << options_.ddp.fsdp_wrap << "\nfsdp.param_dtype " << options_.ddp.fsdp_param_dtype << "\n";
  check_same_everywhere("model", describe_params(*module));
  check_same_everywhere("settings", settings.str());
  // After the agreement: every rank refuses alike.
  if (options_.ddp.fsdp_activation_checkpointing && !shards_parameters(options_.ddp.zero_stage))
    throw UsageError("acc.prepare: fsdp.activation_checkpointing (XLAUNCH_FSDP_ACTIVATION_CHECKPOINTING) recomputes "
                     "the units of ddp.zero_stage 3, and ddp.zero_stage is " + std::to_string(options_.ddp.zero_stage) +
                     ". Set ddp.zero_stage: 3, or fsdp.activation_checkpointing: false (docs/memory.md)");
  check_param_dtype(params);
  // Rank 0's values reach every rank before the reducer is built, so that at stage 3 it keeps each
  // rank's shard of them and lets the whole parameters go, unit by unit: the model exists whole
  // once, as the user built it. (At stages 0-2 the reducer moves the values as they are.)
  broadcast_coalesced(*communicator(device_), state);
  // Stage 3: the buckets are the model's units (ddp/units.h).
  std::unique_ptr<UnitPlan> plan;
  if (shards_parameters(options_.ddp.zero_stage)) {
    std::string why;
    const std::optional<WrapPolicy> policy = WrapPolicy::parse(options_.ddp.fsdp_wrap, &why);
    if (!policy)
      throw UsageError("acc.prepare: fsdp.wrap (XLAUNCH_FSDP_WRAP) is '" + options_.ddp.fsdp_wrap + "': " + why +
                       ". Use " + kWrapPolicySpellings + " (docs/memory.md)");
    plan = std::make_unique<UnitPlan>(plan_units(module, params, names, *policy));
    // A unit's recomputation runs a backward of its own, where a root parameter it uses would
    // receive a gradient before the step's backward gives it another.
    if (options_.ddp.fsdp_activation_checkpointing && !plan->root_param_in_unit.empty())
      throw UsageError("acc.prepare at ddp.zero_stage 3 with fsdp.activation_checkpointing: " + plan->root_param_in_unit +
                       ", and a recomputed unit's parameters receive their gradients in a backward of its own. Hold "
                       "that module inside the unit that uses it, or set fsdp.activation_checkpointing: false");
    if (plan->modules.empty() && policy->kind == WrapPolicy::Kind::kAuto)
      log_main(rank_, "ddp.zero_stage 3 found no unit in the model: every trainable parameter is in the root unit, "
                      "whole for the whole step (stage 2's memory). Declare the blocks as xlaunch::FullyShard<Block> "
                      "or hold them in a torch::nn::Sequential (docs/memory.md)");
  }
  auto reducer = std::make_unique<Reducer>(
      params, names, [this](const at::Device& d) { return bucket_communicator(d); }, options_.ddp,
      plan ? plan->buckets : std::vector<std::vector<size_t>>{});
  check_same_everywhere("gradient buckets", reducer->layout());
  reducer->set_uneven(uneven_);
  std::unique_ptr<Units> units;
  if (plan)
    units = std::make_unique<Units>(std::move(*plan), *reducer, options_.ddp.fsdp_prefetch,
                                    options_.ddp.reshard_after_forward, options_.ddp.fsdp_activation_checkpointing);
  models_.push_back({std::move(module), std::move(reducer), std::move(units)});
  check_uneven_supported();
  return models_.size() - 1;
}

void AcceleratorImpl::check_param_dtype(const std::vector<at::Tensor>& params) const {
  const std::string& dtype = options_.ddp.fsdp_param_dtype;
  if (dtype == "fp32") return;
  const std::string key = "fsdp.param_dtype " + dtype + " (XLAUNCH_FSDP_PARAM_DTYPE)";
  if (dtype != "bf16" && dtype != "fp16")
    throw UsageError("acc.prepare: fsdp.param_dtype (XLAUNCH_FSDP_PARAM_DTYPE) is '" + dtype +
                     "': use fp32, bf16 or fp16 (docs/memory.md)");
  if (!shards_parameters(options_.ddp.zero_stage))
    throw UsageError("acc.prepare: " + key + " sets the dtype stage 3 gathers its units in, and ddp.zero_stage is " +
                     std::to_string(options_.ddp.zero_stage) + ". Set ddp.zero_stage: 3, or mixed_precision: " + dtype +
                     " alone (autocast) below it");
  if (options_.mixed_precision != dtype)
    throw UsageError("acc.prepare: " + key + " computes with " + dtype + " parameters, and mixed_precision is '" +
                     options_.mixed_precision + "': without autocast in the same dtype, float32 inputs and the "
                     "operations autocast keeps in float32 (norms, softmax, the loss) would meet " + dtype +
                     " weights. Set mixed_precision: " + dtype + ", or fsdp.param_dtype: fp32");
  for (const at::Tensor& p : params)
    if (p.scalar_type() != at::kFloat)
      throw UsageError("acc.prepare: " + key + " gathers float32 parameters in " + dtype + ", and this model has " +
                       std::string(c10::toString(p.scalar_type())) + " ones: keep the model in float32 (the "
                       "shards and the optimizer stay float32), or fsdp.param_dtype: fp32");
}

void AcceleratorImpl::broadcast_buffers(size_t model_id) {
  auto& module = *models_.at(model_id).module;
  if (world_ == 1 || !options_.broadcast_buffers || !module.is_training()) return;
  std::vector<at::Tensor> buffers;
  for (const auto& b : module.buffers()) buffers.push_back(b);
  // Rank 0's, or with uneven inputs the lowest rank still training (a joined rank's buffers stop
  // changing): the same choice on every rank, from the last synced backward's contributors.
  if (!buffers.empty())
    broadcast_coalesced(*communicator(device_), buffers, models_.at(model_id).reducer->first_contributor());
}

Loader& AcceleratorImpl::prepare_loader(const Loader& loader) {
  loaders_.push_back(std::make_unique<Loader>(loader.with_place(rank_, world_, device_)));
  check_shards_even(*cpu_comm_, *loaders_.back());
  // Ranks whose streams end at different batches fail together instead of hanging (loader.h).
  if (loaders_.back()->is_stream() && world_ > 1) loaders_.back()->set_stream_agreement(cpu_comm_);
  if (loaders_.size() == 1) {  // the training loader: its batches mark the step boundary
    loaders_.back()->set_next_batch_callback([this] {
      watch::mark_alive(status::Phase::Batch);
      at_step_boundary();
    });
    loaders_.back()->set_epoch_end_callback([this](int64_t) { at_epoch_end(); });
    // Ranks may run out of batches at different steps: they join at the epoch's end (join()).
    if (!loader.options().even_batches || loader.options().already_sharded) {
      loader_joins_ = true;
      expect_uneven_inputs();
    }
  }
  return *loaders_.back();
}

}  // namespace detail
}  // namespace xlaunch
