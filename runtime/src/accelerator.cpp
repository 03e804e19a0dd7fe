#include "xlaunch/accelerator.h"

#include <ATen/Parallel.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/zeros.h>
#include <torch/cuda.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/utils.h>
#if XLAUNCH_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <thread>

#include "profile/device_clock.h"
#include "profile/job_profile.h"
#include "profile/op_profile.h"
#include "profile/step_clock.h"
#include "profile/sync_count.h"
#include "backends/algorithms.h"
#include "xlaunch/autocast.h"
#include "check.h"
#include "xlaunch/metrics.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/error.h"
#include "comm/agree.h"
#include "comm/flat.h"
#include "comm/hierarchical_communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"
#include "comm/object_exchange.h"
#include "comm/ragged.h"
#include "xlaunch/process_state.h"
#include "comm/shm_communicator.h"
#include "nn/prepare_sync_batchnorm.h"
#include "ddp/accumulation.h"
#include "ddp/optim_state.h"
#include "ddp/zero_optimizer.h"
#include "track/tracking_state.h"  // ~Accelerator ends the trackers
#include "watch/preemption.h"
#include "watch/watchdog.h"

namespace xlaunch {
namespace {

int parse_gpu_for_local_rank(const std::string& gpu_ids, int local_rank, int visible) {
  if (gpu_ids.empty() || gpu_ids == "all") {
    if (local_rank >= visible)
      throw UsageError("local rank " + std::to_string(local_rank) + " has no GPU: this machine has " +
                       std::to_string(visible) + " visible; run at most that many processes per machine, " +
                       "or pass --cpu");
    return local_rank;
  }
  std::vector<int> ids;
  std::stringstream ss(gpu_ids);
  for (std::string item; std::getline(ss, item, ',');) ids.push_back(std::stoi(item));
  if (local_rank >= static_cast<int>(ids.size()))
    throw UsageError("gpu_ids '" + gpu_ids + "' lists " + std::to_string(ids.size()) + " GPUs but local rank " +
                     std::to_string(local_rank) + " needs one; list one GPU per local process");
  return ids[local_rank];
}

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

// What processes must share to map each other's shared memory: the kernel (its boot id) and the
// /dev/shm they see (the device and inode of its mount). Not the host name, which machines may
// repeat, nor Open MPI's local ranks, which follow the hostfile's names: this differs between
// machines, containers and namespaces with their own /dev/shm, and only between them.
std::string shared_memory_domain() {
  std::ifstream boot_file("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(boot_file, boot);
  if (boot.empty()) {
    char host[HOST_NAME_MAX + 1] = {0};
    gethostname(host, sizeof host - 1);
    boot = std::string("host ") + host;
  }
  struct stat st {};
  return boot + " /dev/shm " +
         (stat("/dev/shm", &st) == 0 ? std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) : "absent");
}

// Flattens same-dtype tensors into one buffer per dtype, broadcasts it from `root`, and copies back.
void broadcast_coalesced(Communicator& comm, const std::vector<at::Tensor>& tensors, int root = 0) {
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  for (auto& [dtype, group] : by_dtype) {
    std::vector<at::Tensor> flat;
    for (const auto& t : group) flat.push_back(t.detach().reshape({-1}));
    at::Tensor buffer = at::cat(flat);
    comm.broadcast(buffer, root);
    unflatten_into(buffer, group);
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

void detail::explain_refusal(const std::exception_ptr& e, const char* where) { backends::explain_refusal(e, where); }

Accelerator::Accelerator(AcceleratorOptions options) : Accelerator(std::move(options), nullptr) {}

Accelerator::Accelerator(AcceleratorOptions options, std::shared_ptr<Communicator> cpu_comm)
    : options_(std::move(options)), cpu_comm_(std::move(cpu_comm)) {
  mixed_precision_ = parse_mixed_precision(options_.mixed_precision);
  if (options_.gradient_accumulation_steps < 1)
    throw UsageError("gradient_accumulation_steps must be at least 1 (got " +
                     std::to_string(options_.gradient_accumulation_steps) + ")");
  if (options_.checkpoint_total_limit < 0 || options_.checkpoint_every_n_steps < 0)
    throw UsageError("checkpoint.total_limit and checkpoint.every_n_steps must be >= 0 (got " +
                     std::to_string(options_.checkpoint_total_limit) + " and " +
                     std::to_string(options_.checkpoint_every_n_steps) + "); 0 turns them off");
  if (options_.max_object_bytes < 1)
    throw UsageError("max_object_bytes must be at least 1 (got " + std::to_string(options_.max_object_bytes) +
                     "); it is the largest value gather_object / broadcast_object send");
  if ((options_.checkpoint_every_n_steps > 0 || options_.checkpoint_every_epoch) && options_.project_dir.empty())
    throw UsageError("checkpoint.every_n_steps / checkpoint.every_epoch save named checkpoints under project_dir, "
                     "which is not set: set project_dir in the config (XLAUNCH_PROJECT_DIR)");
  // Before anything touches CUDA: CUBLAS_WORKSPACE_CONFIG must be set before the first cuBLAS handle.
  const std::string deterministic_note = backends::apply({options_.cudnn_benchmark, options_.deterministic});
  const Place& place = ProcessState::get().place();
  if (!cpu_comm_) cpu_comm_ = MpiCommunicator::world();
  rank_ = cpu_comm_->rank();
  world_ = cpu_comm_->size();
  window_length_ = options_.gradient_accumulation_steps;
  items_ = std::make_unique<ItemWindow>(world_);
  local_rank_ = cpu_comm_ == MpiCommunicator::world() ? place.local_rank : 0;
  local_world_ = cpu_comm_ == MpiCommunicator::world() ? place.local_world_size : 1;
  if (!options_.cpu && torch::cuda::is_available()) {
    const int gpu = parse_gpu_for_local_rank(options_.gpu_ids, local_rank_, static_cast<int>(torch::cuda::device_count()));
    device_ = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(gpu));
#if XLAUNCH_HAVE_CUDA
    // The current device of this thread from here on, as PyTorch's DDP guidance has it: raw CUDA
    // calls and user code that says torch::kCUDA without an index land on this rank's GPU, not on
    // GPU 0 for every rank.
    c10::cuda::set_device(device_.index());
#endif
  }
  if (mixed_precision_ != MixedPrecision::No) {
    const std::string why = autocast_unsupported_reason(device_.type(), autocast_dtype(mixed_precision_));
    if (!why.empty())
      throw UsageError("mixed_precision " + std::string(to_string(mixed_precision_)) + " on " + device_.str() +
                       ": " + why + ". Use bf16 on the CPU, or mixed_precision: no");
  }
  if (!deterministic_note.empty() && is_main_process()) std::cerr << "xlaunch: " << deterministic_note << std::endl;
  // debug: true on a GPU: the training thread's host-device syncs counted per step for the report.
  if (device_.is_cuda() && env::get_bool(env::kDebug)) profile::syncs::start(env::get_string(env::kStatusDir), rank_);
  if (device_.is_cuda()) profile::device::set_device(device_.index());  // phases timed on the GPU too
  // The report finds this rank's GPU among NVML's by its PCI bus id (docs/performance.md).
  if (device_.is_cuda()) profile::publish_cuda_device(device_.index());
  if (options_.profile_ops < 0 || options_.profile_ops > profile::ops::kMaxSteps)
    throw UsageError("profile_ops must be from 0 to " + std::to_string(profile::ops::kMaxSteps) + " (got " +
                     std::to_string(options_.profile_ops) +
                     "): the optimizer steps to profile operator by operator after the warm-up, 0 turns it off; the "
                     "profiler keeps every event in memory until the last, so a few steps are what to ask for");
  profile::ops::arm({options_.profile_ops, options_.record_shapes, device_.is_cuda(), env::get_string(env::kStatusDir), rank_});
  if (needs_grad_scaler(mixed_precision_)) scaler_ = std::make_unique<GradScaler>(options_.scaler, communicator(device_), device_);
  if (device_.is_cpu()) {
    // Like torchrun: ranks sharing a machine split its cores instead of oversubscribing them.
    int threads = options_.num_threads;
    if (threads == 0 && !std::getenv("OMP_NUM_THREADS") && local_world_ > 1)
      threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local_world_);
    if (threads > 0) at::set_num_threads(threads);
  }
}

// A run that ends (or throws) before its profile_ops steps: the profiler stops here, with what it has.
Accelerator::~Accelerator() { profile::ops::finish(); }

std::shared_ptr<Communicator> Accelerator::communicator(const at::Device& device) {
  if (device.is_cpu()) return cpu_comm_;
  if (device.is_cuda()) {
    if (!cuda_comm_) cuda_comm_ = make_nccl_communicator(cpu_comm_, device.index());
    return cuda_comm_;
  }
  throw UsageError("no communicator for tensors on " + device.str() + "; xlaunch supports CPU and CUDA");
}

std::shared_ptr<Communicator> Accelerator::bucket_communicator(const at::Device& device) {
  if (!device.is_cpu()) return communicator(device);
  if (!cpu_bucket_comm_) {
    cpu_bucket_comm_ = cpu_comm_;
    if (options_.cpu_allreduce != "auto" && options_.cpu_allreduce != "mpi")
      throw UsageError("cpu_allreduce '" + options_.cpu_allreduce + "' is not one of auto, mpi");
    // With MPI underneath: every rank on one machine (the same shared memory), shared memory;
    // several machines of several ranks each, shared memory inside them and MPI between them.
    if (options_.cpu_allreduce == "auto" && world_ > 1 && cpu_comm_ == MpiCommunicator::world()) {
      const MachineLayout layout = machine_layout(cpu_comm_->allgather_strings(shared_memory_domain()));
      const std::string pick = auto_cpu_allreduce(layout);
      try {
        if (pick == "shm") cpu_bucket_comm_ = std::make_shared<ShmCommunicator>(cpu_comm_);
        if (pick == "hier") cpu_bucket_comm_ = std::make_shared<HierarchicalCommunicator>(MpiCommunicator::world(), layout);
      } catch (const CommError& e) {
        if (is_main_process())
          std::cerr << "xlaunch: shared-memory gradient allreduce unavailable, using MPI: " << e.what() << std::endl;
      }
    }
  }
  return cpu_bucket_comm_;
}

void Accelerator::check_same_everywhere(const std::string& what, const std::string& mine) {
  const Agreement agreed = agree_on_rank0(*cpu_comm_, mine);
  if (!agreed.failed()) return;
  throw UsageError("acc.prepare: the ranks do not hold the same " + what + ", so their collectives would not match. "
                   "First difference: " + agreed.message + ". (This is " + where_am_i() + ".) Build the same model "
                   "with the same settings on every rank (same constructor arguments, same XLAUNCH_* environment).");
}

size_t Accelerator::prepare_module(std::shared_ptr<torch::nn::Module> module) {
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
  settings << "mixed_precision " << options_.mixed_precision << "\ngradient_accumulation_steps "
           << options_.gradient_accumulation_steps << "\nsync_with_dataloader " << options_.sync_with_dataloader
           << "\nfind_unused_parameters "
           << options_.ddp.find_unused_parameters << "\nbroadcast_buffers " << options_.broadcast_buffers
           << "\nsync_batchnorm " << options_.sync_batchnorm
           << "\nbucket_cap_mb " << options_.ddp.bucket_cap_mb << "\nfirst_bucket_bytes "
           << options_.ddp.first_bucket_bytes << "\ncpu_allreduce " << options_.cpu_allreduce << "\ncomm_hook "
           << options_.ddp.comm_hook << "\npowersgd_rank " << options_.ddp.powersgd_rank << "\npowersgd_start_step "
           << options_.ddp.powersgd_start_step << "\nzero_stage " << options_.ddp.zero_stage << "\n";
  check_same_everywhere("model", describe_params(*module));
  check_same_everywhere("settings", settings.str());
  auto reducer = std::make_unique<Reducer>(
      params, names, [this](const at::Device& d) { return bucket_communicator(d); }, options_.ddp);
  check_same_everywhere("gradient buckets", reducer->layout());
  broadcast_coalesced(*communicator(device_), state);
  reducer->set_uneven(uneven_);
  models_.push_back({std::move(module), std::move(reducer)});
  check_uneven_supported();
  return models_.size() - 1;
}

PreparedOptimizer& Accelerator::prepare(torch::optim::Optimizer& optimizer) {
  std::shared_ptr<ShardedOptimizer> sharded;
  if (options_.ddp.zero_stage >= 1) {
    std::vector<ShardedOptimizer::Model> models;
    for (size_t i = 0; i < models_.size(); ++i) models.push_back({models_[i].reducer.get(), i});
    sharded = std::make_shared<ShardedOptimizer>(optimizer, std::move(models));
  }
  optimizers_.push_back(std::make_unique<PreparedOptimizer>(this, &optimizer, std::move(sharded)));
  return *optimizers_.back();
}

void Accelerator::broadcast_buffers(size_t model_id) {
  auto& module = *models_.at(model_id).module;
  if (world_ == 1 || !options_.broadcast_buffers || !module.is_training()) return;
  std::vector<at::Tensor> buffers;
  for (const auto& b : module.buffers()) buffers.push_back(b);
  // Rank 0's, or with uneven inputs the lowest rank still training (a joined rank's buffers stop
  // changing): the same choice on every rank, from the last synced backward's contributors.
  if (!buffers.empty())
    broadcast_coalesced(*communicator(device_), buffers, models_.at(model_id).reducer->first_contributor());
}

ForwardScope::ForwardScope(Accelerator& acc, size_t model_id)
    : phase_(std::make_shared<profile::PhaseScope>(profile::kForward)) {
  watch::mark_alive();
  acc.broadcast_buffers(model_id);
  if (acc.mixed_precision_ != MixedPrecision::No)
    autocast_ = std::make_shared<AutocastGuard>(acc.device_.type(), acc.mixed_precision_);
}

ForwardScope::~ForwardScope() = default;

void Accelerator::backward(const at::Tensor& loss) { run_backward(loss, false); }

void Accelerator::refuse_items_with_uneven_inputs() const {
  // A joined rank's shadow steps (ddp/join.cpp) do not take part in the window's count of items
  // (one allreduce at the sync step): the ranks still training would wait for it. Every rank is
  // uneven or none, and every rank calls this form: all refuse at the first call, before any
  // collective.
  if (uneven_ && world_ > 1)
    throw UsageError("acc.backward(loss_sum, num_items) is not supported with uneven inputs (even_batches false, "
                     "already_sharded, or acc.expect_uneven_inputs): a rank whose data ended cannot take part in "
                     "the count of items. Use acc.backward(loss) with a loss normalised per nominal batch "
                     "(docs/data-loading.md#uneven-inputs), or keep even_batches true");
}

void Accelerator::backward(const at::Tensor& loss_sum, double num_items) {
  refuse_items_with_uneven_inputs();
  items_->add_items(num_items);
  run_backward(loss_sum, true);
}

void Accelerator::backward(const at::Tensor& loss_sum, const at::Tensor& num_items) {
  refuse_items_with_uneven_inputs();
  items_->add_items(num_items);
  run_backward(loss_sum, true);
}

void Accelerator::run_backward(const at::Tensor& loss, bool by_items) {
  if (loaders_.empty()) at_step_boundary();  // a loop without a prepared loader: the boundary is here
  const profile::PhaseScope phase(profile::kBackward);
  watch::mark_alive();
  // A preemption asked of this rank travels on the next gradient allreduce (preemption.h).
  if (preempt::requested())
    for (auto& m : models_) m.reducer->set_control_bit(true);
  const bool sync = sync_gradients();
  at::Tensor scaled = loss;
  double factor = 1;  // what the reduced gradients are multiplied by (ddp/accumulation.h, step 3)
  if (by_items) {
    if (items_->divisor() != 1) scaled = scaled / items_->divisor();
    if (sync) factor = items_->close(*cpu_comm_);  // before backward: a window of no items fails here
  } else {
    items_->add_mean(sync);
    if (window_length_ > 1) scaled = scaled / window_length_;
  }
  if (scaler_) scaled = scaler_->scale(scaled);
  for (auto& m : models_) m.reducer->prepare_for_backward(sync);
  try {
    scaled.backward();
  } catch (...) {
    // Leave the reducers usable; the collectives already started complete in finalize.
    for (auto& m : models_) {
      try { m.reducer->finalize_backward(); } catch (...) {}
    }
    backends::explain_refusal(std::current_exception(), "acc.backward");
    throw;
  }
  for (auto& m : models_) m.reducer->finalize_backward();
  if (factor != 1) {
    std::vector<at::Tensor> grads;
    for (auto& m : models_)
      for (at::Tensor& g : m.reducer->reduced_grads()) grads.push_back(std::move(g));
    scale_gradients(grads, factor);
  }
  pending_accumulation_ = !sync;
  if (sync) step_clip_.clear();
}

void Accelerator::accumulate() {
  const int64_t left = options_.sync_with_dataloader && !loaders_.empty() ? loaders_.front()->batches_left() : -1;
  const MicroStep s = plan_micro_step(micro_step_, options_.gradient_accumulation_steps, left);
  sync_gradients_ = s.sync;
  window_length_ = s.window_length;
  micro_step_ = s.next_done;
}

Accelerator::NoSyncGuard::NoSyncGuard(Accelerator& acc) : acc_(acc), saved_(acc.no_sync_) { acc_.no_sync_ = true; }
Accelerator::NoSyncGuard::~NoSyncGuard() { acc_.no_sync_ = saved_; }

void PreparedOptimizer::step() {
  skipped_ = false;
  if (!acc_->sync_gradients()) return;
  {
    const profile::PhaseScope phase(profile::kOptimizer);
    if (sharded_) sharded_->bind_grads();
    acc_->optimizer_step(*this, *inner_, skipped_);
  }
  if (sharded_ && !skipped_) {
    // Every rank skips alike (the scaler's verdict is agreed), so a skipped step gathers nothing.
    const profile::PhaseScope phase(profile::kCommWait);
    sharded_->gather();
  }
  if (!skipped_) {
    ++steps_;
    watch::set_step(++acc_->step_);
    if (acc_->load_seconds_ >= 0) acc_->announce_first_step_after_load();
    if (acc_->optimizers_.back().get() == this) acc_->track_optimizer_step();  // after every optimizer stepped
  }
  acc_->boundary_pending_ = true;
  // The report's ZeRO figures (RankStats::zero): the state once (state_bytes() walks all of it)...
  if (sharded_ && !skipped_ && !state_reported_ && profile::enabled()) {
    profile::zero_state(static_cast<uint64_t>(state_bytes()));
    state_reported_ = true;
  }
  // With several optimizers, the first one prepared ends the report's step.
  if (!acc_->optimizers_.empty() && acc_->optimizers_.front().get() == this) {
    if (sharded_) {  // ... and the bytes of every model's buckets, and what every optimizer gathers, once per step
      uint64_t scattered = 0, gathered = 0;
      for (const auto& m : acc_->models_) scattered += static_cast<uint64_t>(m.reducer->reduce_scattered_bytes());
      for (const auto& o : acc_->optimizers_)
        if (o->sharded_) gathered += static_cast<uint64_t>(o->sharded_->gathered_bytes());
      profile::zero_step(acc_->options_.ddp.zero_stage, scattered, skipped_ ? 0 : gathered);
    }
    profile::step_done(acc_->step_);
  }
}

void PreparedOptimizer::zero_grad(bool set_to_none) {
  if (!acc_->sync_gradients()) return;
  if (!sharded_) {
    inner_->zero_grad(set_to_none);
    return;
  }
  // The model's gradients, not the pieces': theirs are views of the reduced gradients, which the
  // next synced backward overwrites. At stage 1 the gradients are views of their buckets, where the
  // optimizer reads them: zeroed there, they stay (autograd accumulates into them), which saves
  // freeing and faulting in a fresh gradient and copying it into its bucket every step, as
  // PyTorch's DDP with gradient_as_bucket_view. (At stage 2 they are released already.)
  at::NoGradGuard no_grad;
  const bool keep = acc_->options().ddp.zero_stage == 1;
  for (const auto& group : sharded_->original_params())
    for (const at::Tensor& p : group) {
      at::Tensor& grad = const_cast<at::Tensor&>(p).mutable_grad();
      if (!grad.defined()) continue;
      if (set_to_none && !keep) grad = at::Tensor();
      else grad.zero_();
    }
}

int64_t PreparedOptimizer::state_bytes() const { return xlaunch::state_bytes(*inner_); }

void Accelerator::optimizer_step(PreparedOptimizer&, torch::optim::Optimizer& inner, bool& skipped) {
  skipped = false;
  if (!scaler_) {
    inner.step();
    return;
  }
  // Every rank sees the same averaged gradients and reduces found_inf, so every rank skips the
  // same steps and keeps the same scale.
  skipped = !scaler_->step(inner);
  scaler_->update();
}

bool Accelerator::optimizer_step_was_skipped() const {
  for (const auto& o : optimizers_)
    if (o->step_was_skipped()) return true;
  return false;
}

Loader& Accelerator::prepare(const Loader& loader) {
  loaders_.push_back(std::make_unique<Loader>(loader.with_place(rank_, world_, device_)));
  check_shards_even(*cpu_comm_, *loaders_.back());
  // Ranks whose streams end at different batches fail together instead of hanging (loader.h).
  if (loaders_.back()->is_stream() && world_ > 1) loaders_.back()->set_stream_agreement(cpu_comm_);
  if (loaders_.size() == 1) {  // the training loader: its batches mark the step boundary
    loaders_.back()->set_next_batch_callback([this] {
      watch::mark_alive();
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

at::Tensor Accelerator::gather_for_metrics(const at::Tensor& t) {
  if (loaders_.empty())
    throw UsageError("gather_for_metrics needs a loader prepared with acc.prepare(loader), to know which "
                     "samples are padding; or pass the loader: gather_for_metrics(t, loader)");
  return gather_for_metrics(t, *loaders_.back());
}

at::Tensor Accelerator::gather_for_metrics(const at::Tensor& t, const Loader& loader) {
  return xlaunch::gather_for_metrics(*communicator(t.device()), t, loader.last_span());
}

double Accelerator::clip_grad_norm_(double max_norm, double norm_type) {
  if (scaler_ && sync_gradients())
    for (auto& o : optimizers_)
      if (!scaler_->is_unscaled(o->inner())) scaler_->unscale_(o->inner());
  if (sync_gradients()) step_clip_ = {max_norm, norm_type};  // what a joined rank repeats (join)
  // The norm is returned as a number: read on the host, as LibTorch's clip_grad_norm_ reads it.
  profile::syncs::RuntimeSync sync("clip_grad_norm_'s norm, returned as a number");
  // On accumulation micro-steps the gradients are local and whole at every stage: clipped as at stage 0.
  if (options_.ddp.zero_stage >= 1 && !models_.empty() && sync_gradients()) return clip_sharded(max_norm, norm_type);
  std::vector<at::Tensor> params;
  for (auto& m : models_)
    for (const auto& p : m.module->parameters())
      if (p.requires_grad()) params.push_back(p);
  return torch::nn::utils::clip_grad_norm_(params, max_norm, norm_type);
}

double Accelerator::clip_sharded(double max_norm, double norm_type) {
  // Every rank's shard of every bucket: the norm of all of them, agreed in one allreduce, then each
  // rank scales its own shard (the optimizer reads nothing else). As LibTorch's clip_grad_norm_.
  std::vector<at::Tensor> shards;
  for (auto& m : models_)
    for (at::Tensor& t : m.reducer->grad_shards()) shards.push_back(t);
  const bool inf = std::isinf(norm_type);
  at::Tensor local = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device_));
  for (const at::Tensor& t : shards) {
    const at::Tensor n = at::linalg_vector_norm(t, norm_type).to(at::kDouble);
    if (inf) local = at::maximum(local, n);
    else local.add_(n.pow(norm_type));
  }
  if (world_ > 1) communicator(device_)->allreduce(local, inf ? ReduceOp::Max : ReduceOp::Sum);
  const double total = inf ? local.item<double>() : std::pow(local.item<double>(), 1.0 / norm_type);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1) {
    at::NoGradGuard no_grad;
    for (at::Tensor& t : shards) t.mul_(coef);
  }
  return total;
}

at::Tensor Accelerator::gather(const at::Tensor& t) {
  const at::Tensor src = t.defined() && t.dim() == 0 ? t.reshape({1}) : t;
  // The shapes go through the CPU communicator whatever the device, and before communicator() may
  // create the NCCL one (a collective of its own): a rank whose tensor is on another device is
  // named, instead of the ranks waiting in different collectives.
  const std::vector<int64_t> rows = agree_on_rows(*cpu_comm_, src, "gather");
  return gather_agreed_rows(*communicator(src.device()), src, rows);
}

at::Tensor Accelerator::pad_across_processes(const at::Tensor& t, int64_t dim, const at::Scalar& pad_index,
                                             bool pad_first) {
  return pad_across(*cpu_comm_, t, dim, pad_index, pad_first);
}

std::vector<std::string> Accelerator::gather_object_bytes(const std::string& mine) {
  return gather_bytes(*cpu_comm_, mine, options_.max_object_bytes);
}

std::string Accelerator::broadcast_object_bytes(const std::string& mine, int from) {
  return broadcast_bytes(*cpu_comm_, mine, from, options_.max_object_bytes);
}

at::Tensor Accelerator::reduce(const at::Tensor& t, ReduceOp op) {
  at::Tensor out = t.detach().clone().contiguous();
  communicator(out.device())->allreduce(out, op);
  return out;
}

void Accelerator::broadcast(at::Tensor& t, int from) {
  if (t.is_contiguous()) {
    communicator(t.device())->broadcast(t, from);
  } else {
    at::Tensor c = t.contiguous();
    communicator(t.device())->broadcast(c, from);
    t.copy_(c);
  }
}

void Accelerator::wait_for_everyone() { cpu_comm_->barrier(); }

Accelerator::MainProcessFirst::MainProcessFirst(Accelerator& acc) : acc_(acc) {
  if (!acc_.is_main_process()) acc_.wait_for_everyone();
}
Accelerator::MainProcessFirst::~MainProcessFirst() {
  if (acc_.is_main_process()) acc_.wait_for_everyone();
}

void Accelerator::set_seed(uint64_t seed, bool device_specific) {
  torch::manual_seed(seed + (device_specific ? static_cast<uint64_t>(rank_) : 0));
}

}  // namespace xlaunch
