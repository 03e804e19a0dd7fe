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
#include <c10/util/Type.h>

#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "xlaunch/accelerator_options.h"
#include "xlaunch/checkpoint_object.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/extend/communicator.h"  // communicator() hands out the transport's interface
#include "xlaunch/grad_scaler.h"
#include "xlaunch/loader.h"
#include "xlaunch/lr_scheduler.h"
#include "xlaunch/mixed_precision.h"
#include "xlaunch/object_codec.h"
#include "xlaunch/prepared.h"
#include "xlaunch/reducer.h"
#include "xlaunch/split.h"
#include "xlaunch/tracking.h"

namespace xlaunch {

class Accelerator {
 public:
  explicit Accelerator(AcceleratorOptions options = AcceleratorOptions::from_env());
  // With a given CPU communicator (tests: ranks as threads through InProcessCommunicator).
  Accelerator(AcceleratorOptions options, std::shared_ptr<Communicator> cpu_comm);
  ~Accelerator();
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  int process_index() const;
  int num_processes() const;
  int local_process_index() const;
  bool is_main_process() const { return process_index() == 0; }
  bool is_local_main_process() const { return local_process_index() == 0; }
  const at::Device& device() const;
  const AcceleratorOptions& options() const;

  // Prepares a module (a ModuleHolder like torch::nn::Linear or TORCH_MODULE(Net), or a
  // std::shared_ptr<Module>): checks that every rank holds the same parameters (names, shapes,
  // dtypes) and the same settings, failing on every rank with the first difference otherwise;
  // moves it to device(); broadcasts rank 0's parameters and buffers; builds the gradient reducer
  // over its trainable parameters. Call once per model, before training, on every rank.
  template <typename M, typename = std::enable_if_t<!std::is_base_of_v<torch::optim::Optimizer, M> &&
                                                    !std::is_same_v<std::decay_t<M>, Loader> &&
                                                    !std::is_base_of_v<Scheduler, M> &&
                                                    !std::is_base_of_v<torch::optim::LRScheduler, M> &&
                                                    !std::is_base_of_v<torch::optim::ReduceLROnPlateauScheduler, M>>>
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

  // A learning-rate scheduler over a prepared optimizer (see PreparedScheduler): xlaunch's own
  // (get_scheduler in lr_scheduler.h), or LibTorch's (a torch::optim::LRScheduler such as StepLR,
  // or ReduceLROnPlateauScheduler), which need their optimizer named when several are prepared.
  // Saved and restored by save_state / load_state. The scheduler must outlive the Accelerator.
  PreparedScheduler& prepare(Scheduler& scheduler);
  PreparedScheduler& prepare(torch::optim::LRScheduler& scheduler);
  PreparedScheduler& prepare(torch::optim::LRScheduler& scheduler, PreparedOptimizer& optimizer);
  PreparedScheduler& prepare(torch::optim::ReduceLROnPlateauScheduler& scheduler);
  PreparedScheduler& prepare(torch::optim::ReduceLROnPlateauScheduler& scheduler, PreparedOptimizer& optimizer);

  // Saves `obj` with every checkpoint and restores it in load_state, in registration order (an EMA
  // of the weights, the best metric, counters). `obj` is a torch::nn::Module (or its ModuleHolder),
  // or any type with `void save(torch::serialize::OutputArchive&) const` and
  // `void load(torch::serialize::InputArchive&)`; it must outlive the Accelerator. Rank 0's is
  // saved; every rank loads it. A checkpoint whose registered objects differ in number or type is
  // refused, naming both lists. Register before load_state, in the same order on every run.
  template <typename T>
  void register_for_checkpointing(T& obj) {
    if constexpr (std::is_base_of_v<torch::nn::Module, T>)
      register_checkpoint_object(std::make_unique<detail::CheckpointRef<torch::nn::Module>>(&obj, c10::demangle_type<T>()));
    else if constexpr (is_module_holder<T>::value)
      register_checkpoint_object(std::make_unique<detail::CheckpointRef<torch::nn::Module>>(
          obj.ptr().get(), c10::demangle_type<typename T::ContainedType>()));
    else
      register_checkpoint_object(std::make_unique<detail::CheckpointRef<T>>(&obj, c10::demangle_type<T>()));
  }
  void register_checkpoint_object(std::unique_ptr<CheckpointObject> obj);

  // Backward through the loss, with the gradients of every prepared model averaged across ranks
  // on sync steps (overlapped with backward). Divides the loss by the accumulation window's length
  // (AcceleratorOptions' accumulation steps, or fewer at the end of an epoch: see accumulate()) and scales it
  // under fp16. Use instead of loss.backward().
  void backward(const at::Tensor& loss);
  // Backward for a loss that is a sum over items (tokens, valid labels) whose count differs
  // between micro-batches: `loss_sum` sums this rank's per-item losses of the micro-batch,
  // `num_items` counts the items it sums over (an integer, or a 0-dim tensor on any device, e.g.
  // (labels != ignore_index).sum()). At the sync step the gradients are those of
  //   (every rank's loss_sums of the window) / (every rank's num_items of the window),
  // the mean over every item of the window on every rank: accumulation over micro-batches of any
  // sizes equals one large batch, whatever the world size. Costs one allreduce of two numbers per
  // optimizer step (at its sync backward) and at most one pass over the gradients; num_items
  // tensors are read on the host once per optimizer step, not per micro-step. Works under fp16,
  // no_sync(), several prepared models (trained by the same loss) and the communication hooks.
  // Every backward of a window must be of this form, on every rank; a rank whose micro-batch has
  // no item passes 0. A window whose num_items are 0 on every rank throws UsageError on every rank.
  // (How: runtime/src/ddp/accumulation.h.)
  void backward(const at::Tensor& loss_sum, double num_items);
  void backward(const at::Tensor& loss_sum, const at::Tensor& num_items);

  // Gradient accumulation. `acc.accumulate();` at the top of each micro-step starts it: the k-th
  // (k = the accumulation steps) is a sync step; the others accumulate locally with no
  // communication, and the prepared optimizer does not step. With sync_with_dataloader (the
  // default) the micro-step on the last batch of the first prepared loader's epoch is a sync step
  // too, and the next epoch's first micro-step starts a new window: 10 batches with k = 4 step
  // after batches 4, 8 and 10, and backward(loss) divides the last two by 2, so that step takes
  // the mean over its own batches. (Accelerate divides them by k, shrinking that step; the window's
  // length assumes one accumulate() per batch.) (Unlike Accelerate's context manager, nothing
  // happens at the end of the micro-step, so there is no guard to keep alive.)
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
  bool sync_gradients() const;

  // Clips the gradients of every prepared model to a total norm (after unscaling under fp16).
  // Call after backward on sync steps: the gradients are then the same on every rank, so the norm
  // is the global one. Returns the total norm before clipping.
  // With ddp.zero_stage >= 1 the norm is over every rank's shard of the gradients (one allreduce of
  // one number), and each rank clips its own shard: the gradients outside it, which its optimizer
  // does not read, are left as they were.
  double clip_grad_norm_(double max_norm, double norm_type = 2.0);

  // Per-sample results of the batch the prepared loader handed over last (dim 0 = samples),
  // gathered from every rank with the padding that evened out the shards dropped: exactly one
  // row per real sample, as one process would compute. Uses the loader prepared last, or `loader`.
  // Ranks may pass different row counts (a shard that ended early); see metrics.h.
  at::Tensor gather_for_metrics(const at::Tensor& t);
  at::Tensor gather_for_metrics(const at::Tensor& t, const Loader& loader);

  // Uneven inputs (docs/data-loading.md#uneven-inputs; PyTorch's Join): call on a rank whose data
  // has ended while other ranks may still have batches. Until every rank has called it, this rank
  // takes part in the others' training steps with nothing of its own: per step it issues what an
  // active rank's step issues (each prepared model's buffer broadcast, its gradient buckets with
  // zeros, the fp16 scaler's agreement) and applies the same averaged update (clip_grad_norm_ as
  // its own last step called it, every prepared optimizer, every prepared scheduler), so replicas
  // stay bitwise equal; the gradient average divides by the ranks that contributed. Gradients this
  // rank accumulated without sync (gradient accumulation) go into the first such step. Returns once
  // a step had no contributor: every rank has joined, and they leave together, with the buffers of
  // the rank that trained last and a fresh accumulation cycle. Collective, and a world of one
  // returns at once. The first prepared loader joins by itself at the end of each epoch when its
  // options have even_batches false or already_sharded (join() is then a no-op); call it yourself
  // in a loop without one.
  // A training step may then issue no collective of its own (acc.gather, acc.reduce,
  // wait_for_everyone, a metric scheduler's step): a joined rank cannot know of it (the watchdog's
  // verdict says so). Supported: one forward per prepared model per micro-step.
  void join();
  // For loops that call join() themselves, on a GPU: call on every rank before training, so the
  // reducer reads on the host which ranks contributed to each synced backward (a host wait for the
  // last bucket per step). A prepared uneven loader does it, and the CPU needs nothing.
  void expect_uneven_inputs();

  // Mixed precision in use, and (fp16 only) the gradient scaler; null otherwise.
  MixedPrecision mixed_precision() const;
  GradScaler* scaler();
  // Whether the last prepared optimizer step was skipped for non-finite gradients (fp16).
  bool optimizer_step_was_skipped() const;

  // Checkpointing (format in docs/checkpointing.md): everything a run
  // needs to continue. save_state writes atomically (a crash leaves the previous checkpoint
  // loadable); load_state restores it, refusing a checkpoint of another model.
  // Both are collective: call them on every rank, after preparing the same models, optimizers and
  // loaders in the same order; rank 0 writes and reads the directory. After load_state, iterating
  // a prepared loader continues at the batch after the last one handed over before the save.
  // Another world size is allowed: a loader stopped within an epoch continues with exactly the
  // samples of that epoch not read yet (load_state says what carried over).
  // Saved too: prepared schedulers and the objects registered for checkpointing.
  // load_state("latest"): the newest complete named checkpoint (see save_state() below).
  // With checkpoint.async (docs/checkpointing.md, "Asynchronous saves") save_state returns once
  // each rank's state is copied to host memory, and the files are written in the background;
  // wait_for_checkpoint() waits until that checkpoint is complete (collective; it throws Error on
  // every rank when it could not be written). The next save_state, load_state, a preemption and
  // the Accelerator's destruction wait for it too. Without a save under way it returns at once.
  void save_state(const std::string& dir);
  void load_state(const std::string& dir);
  void wait_for_checkpoint();
  // Named checkpoints (options().project_dir; docs/checkpointing.md): save_state() writes
  // <project_dir>/checkpoints/checkpoint_<step> and then removes the oldest beyond
  // checkpoint_total_limit; load_state("latest") loads the newest complete one there, skipping a
  // torn one with a warning that names it.
  void save_state();
  // What `xlaunch run --resume` and a restarted job ask for (options().resume): load_state of
  // "latest" or of the directory given, after every prepare and register, on every rank. Returns
  // whether a checkpoint was loaded: false when nothing was asked, or "latest" finds none yet (the
  // first attempt of a job; said on rank 0).
  bool maybe_load_state();
  // Optimizer steps taken through prepared optimizers (saved and restored with the state).
  int64_t step() const;
  // Whether this rank has been asked to stop for a preemption (SIGUSR1, which `xlaunch run` sends
  // when the cluster warns it: docs/checkpointing.md). The job stops by itself at the next step
  // boundary, after saving a checkpoint; a loop that spends long outside training steps (a long
  // evaluation) may check this and cut it short.
  bool preemption_requested() const;

  // The unwrapped model's parameters and buffers as safetensors in `dir` (Hugging Face's layout:
  // model.safetensors, or shards of at most max_shard_size with model.safetensors.index.json),
  // written by the main process only, every file complete or absent; collective (the others wait
  // for it). xlaunch::load_model(module, dir) loads them back, Python's safetensors reads them.
  template <typename M>
  void save_model(const PreparedModel<M>& model, const std::string& dir, const std::string& max_shard_size = "10GB") {
    save_module(*module_ptr(model.module()), dir, max_shard_size);
  }
  void save_module(const torch::nn::Module& module, const std::string& dir, const std::string& max_shard_size = "10GB");
  // The unwrapped model's parameters and buffers by name, whole, as copies (Accelerate's
  // get_state_dict): at ddp.zero_stage 3 every unit is gathered for it (collective: call it on every
  // rank), elsewhere no communication.
  template <typename M>
  std::vector<std::pair<std::string, at::Tensor>> get_state_dict(const PreparedModel<M>& model) {
    return module_state_dict(*module_ptr(model.module()));
  }
  std::vector<std::pair<std::string, at::Tensor>> module_state_dict(const torch::nn::Module& module);

  // Every rank's tensor concatenated along dim 0 (0-dim tensors are stacked), in rank order. Dim 0
  // may differ between ranks (0 rows included: ragged results such as detections); every other
  // size, the dtype and the device type must agree, and are checked first: a mismatch throws
  // UsageError on every rank, naming each rank's shape. Cost: one allgather of 12 int64 per rank
  // on the CPU communicator before the data; then equal row counts take the one allgather of the
  // rows, different ones one allgather of every rank padded to the largest count (world * max rows
  // travel), cut back after.
  at::Tensor gather(const at::Tensor& t);
  // `t` padded along `dim` (negative counts from the end) to the largest size of that dim over the
  // ranks, with `pad_index`: at the end, or at the start with pad_first; `t` itself on the ranks
  // that have the largest. As Accelerate's pad_across_processes, for gathering outputs of
  // different lengths (generated sequences). The ranks' tensors must have the same number of dims;
  // a mismatch, or a dim they do not have, throws UsageError on every rank (where Accelerate
  // returns the tensor unchanged). Collective: one allgather of 12 int64 per rank.
  at::Tensor pad_across_processes(const at::Tensor& t, int64_t dim = 0, const at::Scalar& pad_index = 0,
                                  bool pad_first = false);

  // Values that are not tensors: bool, integers, float, double, std::string, and std::vector or
  // std::map<std::string, ...> of them, nested (object_codec.h has the format). Collective, with
  // the same T on every rank. A value above options().max_object_bytes once encoded throws
  // UsageError on every rank, naming the rank, its size and the limit.
  //
  // Every rank's value, in rank order. Cost: an allgather of the sizes, then one of every value
  // padded to the largest (world * largest bytes), on the CPU communicator.
  template <typename T>
  std::vector<T> gather_object(const T& value) {
    const std::vector<std::string> all = gather_object_bytes(object_codec::encode(value));
    std::vector<T> out;
    out.reserve(all.size());
    for (size_t r = 0; r < all.size(); ++r)
      out.push_back(object_codec::decode<T>(all[r], "gather_object: rank " + std::to_string(r) + "'s value"));
    return out;
  }
  // Rank `from`'s value on every rank (the others' `value` is not sent). Cost: two broadcasts
  // (the size, then the bytes) on the CPU communicator.
  template <typename T>
  T broadcast_object(const T& value, int from = 0) {
    return object_codec::decode<T>(broadcast_object_bytes(object_codec::encode(value), from),
                                   "broadcast_object: rank " + std::to_string(from) + "'s value");
  }
  // The encoded values themselves (what the two calls above send).
  std::vector<std::string> gather_object_bytes(const std::string& mine);
  std::string broadcast_object_bytes(const std::string& mine, int from = 0);

  // This rank's contiguous share of `items` (split.h: the first ranks take one more when the
  // count does not divide; apply_padding repeats a short share's last item so every rank has
  // ceil(n / world)). No communication: every rank must pass the same list.
  template <typename T>
  std::vector<T> split_between_processes(const std::vector<T>& items, bool apply_padding = false) const {
    std::vector<T> mine;
    for (int64_t i : split_indices(static_cast<int64_t>(items.size()), process_index(), num_processes(), apply_padding))
      mine.push_back(items[static_cast<size_t>(i)]);
    return mine;
  }

  // Sum or mean over ranks (a new tensor; the input is untouched).
  at::Tensor reduce(const at::Tensor& t, ReduceOp op = ReduceOp::Sum);
  // In place: every rank receives `from`'s values.
  void broadcast(at::Tensor& t, int from = 0);
  void wait_for_everyone();

  // Experiment tracking (docs/tracking.md), with Accelerate's names. Trackers are chosen by
  // options().log_with and write to <project_dir>/<project_name>, on the main process only, on a
  // thread of their own: log never waits for the disk.
  //
  // Starts the trackers and records the run's hyperparameters (TensorBoard: as text and for its
  // HPARAMS tab). Collective: call it on every rank, before training. A project_dir that cannot be
  // written is refused here, on every rank, naming the path and the reason. Without log_with it
  // only says (once, on the main process) that acc.log will write nothing. From here on, the
  // ranks' utilization goes to the trackers every options().report_interval optimizer steps
  // (xlaunch/steps_per_s, xlaunch/data_wait...: one small allgather at that step's boundary).
  void init_trackers(const std::string& project_name, const HParams& config = {});
  // Logs `values` at `step` (default: step(), the optimizer steps so far). LogReduce::None writes
  // the main process's values and costs nothing elsewhere; Mean, Sum and Max write the values
  // reduced over every rank: one allgather of at most 256 numbers per rank, so every rank must
  // call it with the same names (a mismatch throws UsageError on every rank). Non-finite values
  // are written as TensorBoard writes them, with a warning.
  void log(const LogValues& values, int64_t step = -1, LogReduce reduce = LogReduce::None);
  // Writes what the trackers still hold and closes them (bounded: at most a minute, then says
  // what it gave up). Also done by the destructor and before a preempted job stops.
  void end_training();
  // Whether init_trackers started at least one tracker.
  bool trackers_active() const;

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
  // The gradient reducer of the model prepared `model_id`-th (0 first).
  Reducer& reducer(size_t model_id);

 private:
  friend class ForwardScope;  // a prepared model's forward enters impl_ (runtime/src/accelerator/prepare.cpp)

  template <typename T>
  static std::shared_ptr<torch::nn::Module> module_ptr(const torch::nn::ModuleHolder<T>& h) { return h.ptr(); }
  template <typename T>
  static std::shared_ptr<torch::nn::Module> module_ptr(const std::shared_ptr<T>& p) { return p; }
  template <typename T>
  struct is_module_holder {
    template <typename U>
    static std::true_type test(const torch::nn::ModuleHolder<U>*);
    static std::false_type test(...);
    static constexpr bool value = decltype(test(std::declval<T*>()))::value;
  };

  // What prepare(model) does, for any module type.
  size_t prepare_module(std::shared_ptr<torch::nn::Module> module);

  std::unique_ptr<detail::AcceleratorImpl> impl_;
};

}  // namespace xlaunch
