#include "comm/nccl_communicator.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstring>
#include <deque>
#include <mutex>

#include "comm/comm_thread.h"
#include "cuda_check.h"
#include "watch/watchdog.h"
#include "xlaunch/error.h"

namespace xlaunch {
namespace {

ncclDataType_t nccl_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kByte: return ncclUint8;
    case at::kChar: return ncclInt8;
    case at::kBool: return ncclUint8;
    default: throw UsageError(std::string("NCCL cannot move tensors of dtype ") + at::toString(t));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
  }
  return ncclSum;
}

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<at::cuda::CUDAEvent> done, c10::DeviceIndex device) : done_(std::move(done)), device_(device) {}
  void wait() override { done_->block(at::cuda::getCurrentCUDAStream(device_)); }

 private:
  std::shared_ptr<at::cuda::CUDAEvent> done_;
  c10::DeviceIndex device_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const std::shared_ptr<Communicator>& bootstrap, int device)
      : rank_(bootstrap->rank()), size_(bootstrap->size()), device_(static_cast<c10::DeviceIndex>(device)),
        stream_(at::cuda::getStreamFromPool(/*isHighPriority=*/true, device_)) {
    ncclUniqueId id;
    if (rank_ == 0) XLAUNCH_CHECK_NCCL(ncclGetUniqueId(&id));
    at::Tensor bytes = at::empty({static_cast<int64_t>(sizeof id)}, at::kByte);
    std::memcpy(bytes.data_ptr(), &id, sizeof id);
    bootstrap->broadcast(bytes, 0);
    std::memcpy(&id, bytes.data_ptr(), sizeof id);
    c10::cuda::CUDAGuard guard(device_);
    XLAUNCH_CHECK_NCCL(ncclCommInitRank(&comm_, size_, id, rank_));
    poller_ = watch::add_poller([this](bool ending) { return poll(ending); });
  }
  ~NcclCommunicator() override {
    watch::remove_poller(poller_);
    if (comm_) ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }

  std::shared_ptr<Work> allreduce_async(at::Tensor t, ReduceOp op) override {
    check(t, "allreduce");
    return enqueue("allreduce", {t}, [&] {
      XLAUNCH_CHECK_NCCL(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.scalar_type()),
                                       nccl_op(op), comm_, stream_.stream()));
    });
  }
  std::shared_ptr<Work> broadcast_async(at::Tensor t, int root) override {
    check(t, "broadcast");
    return enqueue("broadcast", {t}, [&] {
      XLAUNCH_CHECK_NCCL(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.scalar_type()), root,
                                       comm_, stream_.stream()));
    });
  }
  std::shared_ptr<Work> allgather_async(at::Tensor in, at::Tensor out) override {
    check(in, "allgather");
    check(out, "allgather");
    if (out.numel() != in.numel() * size_ || out.scalar_type() != in.scalar_type())
      throw UsageError("allgather: the output must hold world_size * input elements of the input's dtype");
    return enqueue("allgather", {in, out}, [&] {
      XLAUNCH_CHECK_NCCL(ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), nccl_type(in.scalar_type()),
                                       comm_, stream_.stream()));
    });
  }
  std::shared_ptr<Work> barrier_async() override {
    at::Tensor one = at::empty({1}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, device_));
    one.fill_(1);
    return allreduce_async(one, ReduceOp::Sum);
  }

 private:
  void check(const at::Tensor& t, const char* what) const {
    if (!t.is_cuda() || t.device().index() != device_)
      throw UsageError(std::string(what) + ": the NCCL communicator of cuda:" + std::to_string(device_) +
                       " got a tensor on " + t.device().str());
    if (!t.is_contiguous()) throw UsageError(std::string(what) + ": the tensor must be contiguous");
  }

  // Logged as issued and running when it is queued on the stream (with debug on, after every rank
  // has issued the same collective); finished when poll() sees its event complete.
  template <typename F>
  std::shared_ptr<Work> enqueue(const char* op, std::initializer_list<at::Tensor> tensors, F&& call) {
    const at::Tensor& first = *tensors.begin();
    const uint64_t seq = watch::issued(op, dtype_name(first.scalar_type()), first.numel(),
                                       static_cast<int>(first.element_size()));
    watch::started(seq);
    c10::cuda::CUDAGuard guard(device_);
    at::cuda::CUDAStream compute = at::cuda::getCurrentCUDAStream(device_);
    at::cuda::CUDAEvent inputs_ready;
    inputs_ready.record(compute);
    inputs_ready.block(stream_);
    call();
    for (const auto& t : tensors)
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
    auto done = std::make_shared<at::cuda::CUDAEvent>();
    done->record(stream_);
    {
      std::lock_guard<std::mutex> lk(pending_mu_);
      pending_.emplace_back(seq, done);
    }
    return std::make_shared<NcclWork>(std::move(done), device_);
  }

  // On the watchdog's thread (watch::add_poller): marks finished collectives, reports an
  // asynchronous NCCL error, and aborts the communicator when the watchdog ends the job, so that
  // no kernel keeps waiting for a peer that is gone.
  std::string poll(bool ending) {
    if (ending) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
      return "";
    }
    c10::cuda::CUDAGuard guard(device_);
    {
      std::lock_guard<std::mutex> lk(pending_mu_);
      while (!pending_.empty() && pending_.front().second->query()) {
        watch::finished(pending_.front().first, true);
        pending_.pop_front();
      }
    }
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress)
      return "NCCL failed on rank " + std::to_string(rank_) + " (cuda:" + std::to_string(device_) +
             "): " + ncclGetErrorString(state) + " (ncclCommGetAsyncError)";
    return "";
  }

  int rank_, size_;
  c10::DeviceIndex device_;
  at::cuda::CUDAStream stream_;
  ncclComm_t comm_ = nullptr;
  std::mutex pending_mu_;
  std::deque<std::pair<uint64_t, std::shared_ptr<at::cuda::CUDAEvent>>> pending_;  // oldest first
  int poller_ = -1;
};

}  // namespace

std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Communicator> bootstrap, int device_index) {
  return std::make_shared<NcclCommunicator>(bootstrap, device_index);
}

}  // namespace xlaunch
