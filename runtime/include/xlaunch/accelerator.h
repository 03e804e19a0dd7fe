// The Accelerator: the few calls that make a LibTorch training loop data-parallel.
//
//   xlaunch::Accelerator acc;                        // place and settings from `xlaunch run`
//   auto model = acc.prepare(Net());                 // same weights on every rank, on acc.device()
//   auto& opt = acc.prepare(sgd);                    // steps only on sync steps (accumulation)
//   for (auto& [x, y] : batches) {
//     auto loss = torch::nn::functional::cross_entropy(model(x), y);
//     acc.backward(loss);                            // gradients averaged across ranks
//     opt.step();
//     opt.zero_grad();
//   }
//
// Settings come from the launcher's XLAUNCH_* environment (AcceleratorOptions::from_env), or from
// the options passed in. A process started by hand is rank 0 of 1: the same code path, and the
// collectives return at once. Names follow HuggingFace Accelerate.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>

#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "xlaunch/env_vars.h"
#include "xlaunch/extend/communicator.h"  // communicator() hands out the transport's interface
#include "xlaunch/grad_scaler.h"
#include "xlaunch/loader.h"
#include "xlaunch/mixed_precision.h"
#include "xlaunch/reducer.h"

namespace xlaunch {

// The defaults of the settings `xlaunch run` controls are the XLAUNCH_* variables' own (env_vars.h).
struct AcceleratorOptions {
  // no | fp16 | bf16 (fp16 adds a GradScaler).
  std::string mixed_precision = env::default_string(env::kMixedPrecision);
  GradScalerOptions scaler;  // used with fp16
  int gradient_accumulation_steps = static_cast<int>(env::default_int(env::kGradAccumSteps));
  bool cpu = env::default_bool(env::kUseCpu);  // train on the CPU even where GPUs exist
  // GPUs of this machine; local rank i takes the i-th. The constructor makes it the calling
  // thread's current CUDA device, so torch::kCUDA without an index means this rank's GPU.
  std::string gpu_ids = env::default_string(env::kGpuIds);
  ReducerOptions ddp;  // buckets, unused parameters, communication hook (reducer.h)
  // Rank 0's buffers before each training forward.
  bool broadcast_buffers = env::default_bool(env::kBroadcastBuffers);
  // CPU gradient allreduce: "auto" uses shared memory when every rank is on this machine (see
  // shm_communicator.h), shared memory inside machines and MPI between them when the job spans
  // several machines of several ranks each (hierarchical_communicator.h), else MPI; "mpi" always
  // a flat MPI allreduce over every rank.
  std::string cpu_allreduce = "auto";
  // Intra-op threads per rank on CPU; 0: cores / local ranks when OMP_NUM_THREADS is unset.
  int num_threads = static_cast<int>(env::default_int(env::kNumCpuThreads));

  // From the XLAUNCH_* variables (see env_vars.h). Throws UsageError on malformed values.
  static AcceleratorOptions from_env();
};

class Accelerator;

// While alive: rank 0's buffers have been broadcast (training mode, more than one rank) and
// autocast is on when mixed precision is. Made by PreparedModel::operator().
class ForwardScope {
 public:
  ForwardScope(Accelerator& acc, size_t model_id);
  ~ForwardScope();
  ForwardScope(const ForwardScope&) = delete;
  ForwardScope& operator=(const ForwardScope&) = delete;

 private:
  std::shared_ptr<void> phase_;     // the step clock's "forward" phase (docs/performance.md)
  std::shared_ptr<void> autocast_;  // the autocast guard, when mixed precision is on
};

// A prepared model: call it like the module (model(x) runs forward), or reach the module with ->.
template <typename M>
class PreparedModel {
 public:
  PreparedModel(Accelerator* acc, M module, size_t id) : acc_(acc), module_(std::move(module)), id_(id) {}

  template <typename... Args>
  auto operator()(Args&&... args) {
    ForwardScope scope(*acc_, id_);
    return module_->forward(std::forward<Args>(args)...);
  }
  auto operator->() { return &*module_; }
  auto operator->() const { return &*module_; }
  const M& module() const { return module_; }

 private:
  Accelerator* acc_;
  M module_;
  size_t id_;
};

// A prepared optimizer: steps and zeroes only on sync steps (gradient accumulation), and steps
// through the gradient scaler under fp16 (a step with non-finite gradients is skipped).
class PreparedOptimizer {
 public:
  PreparedOptimizer(Accelerator* acc, torch::optim::Optimizer* inner) : acc_(acc), inner_(inner) {}
  void step();
  // Default set_to_none=true, like LibTorch; the reducer moves the next gradients into its buckets.
  void zero_grad(bool set_to_none = true);
  bool step_was_skipped() const { return skipped_; }
  torch::optim::Optimizer& inner() { return *inner_; }

 private:
  Accelerator* acc_;
  torch::optim::Optimizer* inner_;
  bool skipped_ = false;
};

class Accelerator {
 public:
  explicit Accelerator(AcceleratorOptions options = AcceleratorOptions::from_env());
  // With a given CPU communicator (tests: ranks as threads through InProcessCommunicator).
  Accelerator(AcceleratorOptions options, std::shared_ptr<Communicator> cpu_comm);
  ~Accelerator();
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  int process_index() const { return rank_; }
  int num_processes() const { return world_; }
  int local_process_index() const { return local_rank_; }
  bool is_main_process() const { return rank_ == 0; }
  bool is_local_main_process() const { return local_rank_ == 0; }
  const at::Device& device() const { return device_; }
  const AcceleratorOptions& options() const { return options_; }

  // Prepares a module (a ModuleHolder like torch::nn::Linear or TORCH_MODULE(Net), or a
  // std::shared_ptr<Module>): checks that every rank holds the same parameters (names, shapes,
  // dtypes) and the same settings, failing on every rank with the first difference otherwise;
  // moves it to device(); broadcasts rank 0's parameters and buffers; builds the gradient reducer
  // over its trainable parameters. Call once per model, before training, on every rank.
  template <typename M, typename = std::enable_if_t<!std::is_base_of_v<torch::optim::Optimizer, M> &&
                                                    !std::is_same_v<std::decay_t<M>, Loader>>>
  PreparedModel<M> prepare(M model) {
    const size_t id = prepare_module(module_ptr(model));
    return PreparedModel<M>(this, std::move(model), id);
  }
  // Wraps an optimizer built over a prepared model's parameters. The Accelerator keeps the
  // wrapper; the optimizer must outlive the Accelerator.
  PreparedOptimizer& prepare(torch::optim::Optimizer& optimizer);

  // This rank's loader over the same dataset: its shard of every epoch (see DistributedSampler),
  // with batches handed over on device(). The Accelerator keeps it; iterate the returned loader.
  Loader& prepare(const Loader& loader);

  // Backward through the loss, with the gradients of every prepared model averaged across ranks
  // on sync steps (overlapped with backward). Divides the loss by gradient_accumulation_steps and
  // scales it under fp16. Use instead of loss.backward().
  void backward(const at::Tensor& loss);

  // Gradient accumulation. `acc.accumulate();` at the top of each micro-step starts it: the k-th
  // (k = gradient_accumulation_steps) is a sync step; the others accumulate locally with no
  // communication, and the prepared optimizer does not step. (Unlike Accelerate's context
  // manager, nothing happens at the end of the micro-step, so there is no guard to keep alive.)
  void accumulate();
  // While alive, backward accumulates locally with no communication.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(Accelerator& acc);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    Accelerator& acc_;
    bool saved_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }
  // Whether the current micro-step synchronises gradients (and the optimizer steps).
  bool sync_gradients() const { return sync_gradients_ && !no_sync_; }

  // Clips the gradients of every prepared model to a total norm (after unscaling under fp16).
  // Call after backward on sync steps: the gradients are then the same on every rank, so the norm
  // is the global one. Returns the total norm before clipping.
  double clip_grad_norm_(double max_norm, double norm_type = 2.0);

  // Per-sample results of the batch the prepared loader handed over last (dim 0 = samples),
  // gathered from every rank with the padding that evened out the shards dropped: exactly one
  // row per real sample, as one process would compute. Uses the loader prepared last, or `loader`.
  at::Tensor gather_for_metrics(const at::Tensor& t);
  at::Tensor gather_for_metrics(const at::Tensor& t, const Loader& loader);

  // Mixed precision in use, and (fp16 only) the gradient scaler; null otherwise.
  MixedPrecision mixed_precision() const { return mixed_precision_; }
  GradScaler* scaler() { return scaler_.get(); }
  // Whether the last prepared optimizer step was skipped for non-finite gradients (fp16).
  bool optimizer_step_was_skipped() const;

  // Checkpointing (format in docs/checkpointing.md): everything a run
  // needs to continue. save_state writes atomically (a crash leaves the previous checkpoint
  // loadable); load_state restores it, refusing a checkpoint of another model.
  // Both are collective: call them on every rank, after preparing the same models, optimizers and
  // loaders in the same order; rank 0 writes and reads the directory. After load_state, iterating
  // a prepared loader continues at the batch after the last one handed over before the save.
  // Another world size is allowed: everything is restored except a loader position within an
  // epoch, which names other samples there, so that epoch restarts (load_state says so).
  void save_state(const std::string& dir);
  void load_state(const std::string& dir);
  // Optimizer steps taken through prepared optimizers (saved and restored with the state).
  int64_t step() const { return step_; }

  // Every rank's tensor concatenated along dim 0 (0-dim tensors are stacked), in rank order.
  at::Tensor gather(const at::Tensor& t);
  // Sum or mean over ranks (a new tensor; the input is untouched).
  at::Tensor reduce(const at::Tensor& t, ReduceOp op = ReduceOp::Sum);
  // In place: every rank receives `from`'s values.
  void broadcast(at::Tensor& t, int from = 0);
  void wait_for_everyone();

  // Prints on the main process only (a line, flushed).
  template <typename... Args>
  void print(const Args&... args) const {
    if (!is_main_process()) return;
    std::ostringstream os;
    (os << ... << args);
    std::cout << os.str() << std::endl;
  }
  // `{ auto g = acc.main_process_first(); download_or_preprocess(); }`: the main process runs the
  // block first, the others after it finished.
  class MainProcessFirst {
   public:
    explicit MainProcessFirst(Accelerator& acc);
    ~MainProcessFirst();
    MainProcessFirst(const MainProcessFirst&) = delete;
    MainProcessFirst& operator=(const MainProcessFirst&) = delete;

   private:
    Accelerator& acc_;
  };
  MainProcessFirst main_process_first() { return MainProcessFirst(*this); }
  // Seeds torch's generators (CPU and CUDA); device_specific adds the rank to the seed.
  void set_seed(uint64_t seed, bool device_specific = false);

  // The communicator that reduces tensors on `device` (MPI for CPU, NCCL for CUDA).
  std::shared_ptr<Communicator> communicator(const at::Device& device);
  // The communicator that reduces gradient buckets on `device`: on CPU (cpu_allreduce "auto"),
  // shared memory when every rank is on this machine, hierarchical when the ranks span several
  // machines with several ranks on each, else the MPI one. Collective on its first call.
  std::shared_ptr<Communicator> bucket_communicator(const at::Device& device);
  Reducer& reducer(size_t model_id) { return *models_.at(model_id).reducer; }

 private:
  friend class ForwardScope;
  friend class PreparedOptimizer;
  friend struct CheckpointIO;  // save_state / load_state (runtime/src/state/accelerator_state.cpp)

  template <typename T>
  static std::shared_ptr<torch::nn::Module> module_ptr(const torch::nn::ModuleHolder<T>& h) { return h.ptr(); }
  template <typename T>
  static std::shared_ptr<torch::nn::Module> module_ptr(const std::shared_ptr<T>& p) { return p; }

  size_t prepare_module(std::shared_ptr<torch::nn::Module> module);
  void check_same_everywhere(const std::string& what, const std::string& mine);
  void broadcast_buffers(size_t model_id);
  void optimizer_step(PreparedOptimizer& opt, torch::optim::Optimizer& inner, bool& skipped);

  struct Model {
    std::shared_ptr<torch::nn::Module> module;
    std::unique_ptr<Reducer> reducer;
  };

  AcceleratorOptions options_;
  int rank_ = 0, world_ = 1, local_rank_ = 0, local_world_ = 1;
  at::Device device_{at::kCPU};
  std::shared_ptr<Communicator> cpu_comm_;
  std::shared_ptr<Communicator> cuda_comm_;
  std::shared_ptr<Communicator> cpu_bucket_comm_;  // what reduces CPU gradient buckets
  std::vector<Model> models_;
  std::vector<std::unique_ptr<PreparedOptimizer>> optimizers_;
  std::vector<std::unique_ptr<Loader>> loaders_;
  MixedPrecision mixed_precision_ = MixedPrecision::No;
  std::unique_ptr<GradScaler> scaler_;
  int64_t micro_step_ = 0;
  int64_t step_ = 0;
  bool sync_gradients_ = true;
  bool no_sync_ = false;
};

}  // namespace xlaunch
