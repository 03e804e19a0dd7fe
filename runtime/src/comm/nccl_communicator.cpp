#include "comm/nccl_communicator.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstring>

#include "comm/comm_thread.h"
#include "comm/pending_collectives.h"
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

// Work::wait() orders the caller's current stream after the collective; a barrier's wait also
// blocks the host until the collective completed, as a barrier promises (bounded by the watchdog,
// which sees the barrier open on the progress board).
class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<at::cuda::CUDAEvent> done, c10::DeviceIndex device, bool block_host)
      : done_(std::move(done)), device_(device), block_host_(block_host) {}
  void wait() override {
    done_->block(at::cuda::getCurrentCUDAStream(device_));
    if (block_host_) done_->synchronize();
  }

 private:
  std::shared_ptr<at::cuda::CUDAEvent> done_;
  c10::DeviceIndex device_;
  bool block_host_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const std::shared_ptr<Communicator>& bootstrap, int device)
      : rank_(bootstrap->rank()), size_(bootstrap->size()), device_(static_cast<c10::DeviceIndex>(device)),
        stream_(at::cuda::getStreamFromPool(/*isHighPriority=*/true, device_)) {
    if (size_ > 1) init(*bootstrap);  // a world of one needs no NCCL: its collectives are identities
    poller_ = watch::add_poller([this](bool ending) { return poll(ending); });
  }
  // As ~ProcessGroupNCCL: with collectives still in flight, or after an asynchronous error, abort
  // (destroying would wait for queued work that may never finish); otherwise destroy.
  ~NcclCommunicator() override {
    watch::remove_poller(poller_);
    if (!comm_) return;
    bool settled = false;
    try {
      c10::cuda::CUDAGuard guard(device_);
      pending_.release_completed();
      settled = pending_.in_flight() == 0;
    } catch (...) {  // a failed device: abort
    }
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess || state != ncclSuccess) settled = false;
    if (settled) ncclCommDestroy(comm_);
    else ncclCommAbort(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }

  std::shared_ptr<Work> allreduce_async(at::Tensor t, ReduceOp op) override {
    check(t, "allreduce");
    op = reduce_op_for(t.scalar_type(), op, "allreduce");
    if (size_ == 1) return completed_work();
    return enqueue("allreduce", {t}, false, [&] {
      XLAUNCH_CHECK_NCCL(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.scalar_type()),
                                       nccl_op(op), comm_, stream_.stream()));
    });
  }
  std::shared_ptr<Work> broadcast_async(at::Tensor t, int root) override {
    check(t, "broadcast");
    if (root < 0 || root >= size_)
      throw UsageError("broadcast: root " + std::to_string(root) + " is not a rank of a world of " +
                       std::to_string(size_));
    if (size_ == 1) return completed_work();
    return enqueue("broadcast", {t}, false, [&] {
      XLAUNCH_CHECK_NCCL(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.scalar_type()), root,
                                       comm_, stream_.stream()));
    });
  }
  std::shared_ptr<Work> allgather_async(at::Tensor in, at::Tensor out) override {
    check(in, "allgather");
    check(out, "allgather");
    if (out.numel() != in.numel() * size_ || out.scalar_type() != in.scalar_type())
      throw UsageError("allgather: the output must hold world_size * input elements of the input's dtype");
    if (size_ == 1) {
      out.view(-1).copy_(in.view(-1));  // on the caller's current stream: ordered like any op of its own
      return completed_work();
    }
    return enqueue("allgather", {in, out}, false, [&] {
      XLAUNCH_CHECK_NCCL(ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), nccl_type(in.scalar_type()),
                                       comm_, stream_.stream()));
    });
  }
  // ncclReduceScatter: rank r's `out` receives chunk r (recvcount = out.numel()); `in` is left as it
  // was. Avg is NCCL's own (ncclAvg), as for allreduce.
  std::shared_ptr<Work> reduce_scatter_async(at::Tensor in, at::Tensor out, ReduceOp op) override {
    check_reduce_scatter_args(*this, in, out);
    check(in, "reduce_scatter");
    check(out, "reduce_scatter");
    op = reduce_op_for(in.scalar_type(), op, "reduce_scatter");
    if (size_ == 1) {
      out.view(-1).copy_(in.view(-1));  // on the caller's current stream: ordered like any op of its own
      return completed_work();
    }
    return enqueue("reduce_scatter", {in, out}, false, [&] {
      XLAUNCH_CHECK_NCCL(ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), nccl_type(in.scalar_type()),
                                           nccl_op(op), comm_, stream_.stream()));
    });
  }
  std::shared_ptr<Work> barrier_async() override {
    if (size_ == 1) return completed_work();
    at::Tensor one = at::empty({1}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, device_));
    one.fill_(1);
    return enqueue("barrier", {one}, true, [&] {
      XLAUNCH_CHECK_NCCL(ncclAllReduce(one.data_ptr(), one.data_ptr(), 1, ncclFloat32, ncclSum, comm_,
                                       stream_.stream()));
    });
  }

 private:
  // Rank 0's unique id over the bootstrap (CPU) communicator, then ncclCommInitRank, which waits
  // for every rank: logged on the progress board as a collective ("nccl_init"), so the watchdog
  // bounds it by timeout_s like any other and names the ranks that never came (a peer lost during
  // init gets a verdict, not a wait until mpirun gives up).
  void init(Communicator& bootstrap) {
    ncclUniqueId id;
    if (rank_ == 0) XLAUNCH_CHECK_NCCL(ncclGetUniqueId(&id));
    at::Tensor bytes = at::empty({static_cast<int64_t>(sizeof id)}, at::kByte);
    std::memcpy(bytes.data_ptr(), &id, sizeof id);
    bootstrap.broadcast(bytes, 0);
    std::memcpy(&id, bytes.data_ptr(), sizeof id);
    c10::cuda::CUDAGuard guard(device_);
    const uint64_t seq = watch::issued("nccl_init", "uint8", static_cast<int64_t>(sizeof id), 1);
    watch::started(seq);
    const ncclResult_t rc = ncclCommInitRank(&comm_, size_, id, rank_);
    watch::finished(seq, rc == ncclSuccess);
    if (rc != ncclSuccess) comm_ = nullptr;
    XLAUNCH_CHECK_NCCL(rc);
  }

  void check(const at::Tensor& t, const char* what) const {
    if (!t.is_cuda() || t.device().index() != device_)
      throw UsageError(std::string(what) + ": the NCCL communicator of cuda:" + std::to_string(device_) +
                       " got a tensor on " + t.device().str());
    if (!t.is_contiguous()) throw UsageError(std::string(what) + ": the tensor must be contiguous");
  }

  // Logged as issued and running when it is queued on the stream (with debug on, after every rank
  // has issued the same collective); finished when its event is seen complete (pending_).
  template <typename F>
  std::shared_ptr<Work> enqueue(const char* op, std::initializer_list<at::Tensor> tensors, bool block_host, F&& call) {
    const at::Tensor& first = *tensors.begin();
    const uint64_t seq = watch::issued(op, dtype_name(first.scalar_type()), first.numel(),
                                       static_cast<int>(first.element_size()));
    watch::started(seq);
    c10::cuda::CUDAGuard guard(device_);
    at::cuda::CUDAStream compute = at::cuda::getCurrentCUDAStream(device_);
    const std::shared_ptr<at::cuda::CUDAEvent> inputs_ready = events_->acquire();  // back to the pool at once:
    inputs_ready->record(compute);                                                  // the wait is queued
    inputs_ready->block(stream_);
    call();
    for (const auto& t : tensors)
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
    std::shared_ptr<at::cuda::CUDAEvent> done = events_->acquire();
    done->record(stream_);
    pending_.add(seq, done);
    return std::make_shared<NcclWork>(std::move(done), device_, block_host);
  }

  // On the watchdog's thread (watch::add_poller): marks finished collectives; reports an
  // asynchronous NCCL error, or a CUDA error left on the device by any kernel (a sticky error
  // makes the events' queries throw, which the watchdog reports too); and aborts the communicator
  // when the watchdog ends the job, so that no kernel keeps waiting for a peer that is gone.
  std::string poll(bool ending) {
    if (ending) {
      if (comm_) ncclCommAbort(comm_);
      comm_ = nullptr;
      return "";
    }
    c10::cuda::CUDAGuard guard(device_);
    try {
      pending_.release_completed();
    } catch (const c10::Error& e) {
      return "CUDA failed on rank " + std::to_string(rank_) + " (cuda:" + std::to_string(device_) +
             ") while a collective's completion was queried: " + e.what_without_backtrace();
    }
    const cudaError_t device_state = cudaStreamQuery(stream_.stream());
    if (device_state != cudaSuccess) (void)cudaGetLastError();  // "not ready" is no error: clear it
    if (device_state != cudaSuccess && device_state != cudaErrorNotReady)
      return "CUDA failed on rank " + std::to_string(rank_) + " (cuda:" + std::to_string(device_) +
             "): " + cudaGetErrorString(device_state) + " (a kernel failed; the device cannot continue)";
    ncclResult_t state = ncclSuccess;
    if (comm_ && ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress)
      return "NCCL failed on rank " + std::to_string(rank_) + " (cuda:" + std::to_string(device_) +
             "): " + ncclGetErrorString(state) + " (ncclCommGetAsyncError)";
    return "";
  }

  int rank_, size_;
  c10::DeviceIndex device_;
  at::cuda::CUDAStream stream_;
  ncclComm_t comm_ = nullptr;
  std::shared_ptr<EventPool<at::cuda::CUDAEvent>> events_ = std::make_shared<EventPool<at::cuda::CUDAEvent>>();
  PendingCollectives<at::cuda::CUDAEvent> pending_;
  int poller_ = -1;
};

}  // namespace

std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Communicator> bootstrap, int device_index) {
  return std::make_shared<NcclCommunicator>(bootstrap, device_index);
}

}  // namespace xlaunch
