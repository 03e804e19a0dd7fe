// Making an Accelerator: its settings checked, its place (rank, device, communicators), the
// process-wide choices it makes before anything touches CUDA, and the communicators it hands out.
#include <ATen/Parallel.h>
#include <torch/cuda.h>
#if XLAUNCH_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "accelerator/impl.h"
#include "algorithms/algorithms.h"
#include "comm/hierarchical_communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"
#include "comm/shm_communicator.h"
#include "profile/device_clock.h"
#include "profile/job_profile.h"
#include "profile/op_profile.h"
#include "profile/sync_count.h"
#include "xlaunch/autocast.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/error.h"
#include "xlaunch/process_state.h"

namespace xlaunch::detail {
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

}  // namespace

AcceleratorImpl::AcceleratorImpl(AcceleratorOptions options, std::shared_ptr<Communicator> cpu_comm)
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
  const std::string deterministic_note = algorithms::apply({options_.cudnn_benchmark, options_.deterministic});
  const Place& place = ProcessState::get().place();
  if (!cpu_comm_) cpu_comm_ = MpiCommunicator::world();
  rank_ = cpu_comm_->rank();
  world_ = cpu_comm_->size();
  accumulation_steps_ = options_.gradient_accumulation_steps;
  window_length_ = accumulation_steps_;
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
  if (!deterministic_note.empty() && rank_ == 0) std::cerr << "xlaunch: " << deterministic_note << std::endl;
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

AcceleratorImpl::~AcceleratorImpl() {
  // A checkpoint still being written in the background (checkpoint.async) is completed, each rank
  // its own part (rank 0 waiting, bounded, for the others'); a failure is printed, not thrown.
  try {
    wait_for_save(/*collective=*/false);
  } catch (const std::exception& e) {
    std::cerr << "[xlaunch] rank " << rank_ << ": " << e.what() << std::endl;
  }
}

std::shared_ptr<Communicator> AcceleratorImpl::communicator(const at::Device& device) {
  if (device.is_cpu()) return cpu_comm_;
  if (device.is_cuda()) {
    if (!cuda_comm_) cuda_comm_ = make_nccl_communicator(cpu_comm_, device.index());
    return cuda_comm_;
  }
  throw UsageError("no communicator for tensors on " + device.str() + "; xlaunch supports CPU and CUDA");
}

std::shared_ptr<Communicator> AcceleratorImpl::bucket_communicator(const at::Device& device) {
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
        if (rank_ == 0)
          std::cerr << "xlaunch: shared-memory gradient allreduce unavailable, using MPI: " << e.what() << std::endl;
      }
    }
  }
  return cpu_bucket_comm_;
}

}  // namespace xlaunch::detail
