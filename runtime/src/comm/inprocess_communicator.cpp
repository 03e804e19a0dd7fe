#include "comm/inprocess_communicator.h"

#include "xlaunch/error.h"

namespace xlaunch {

InProcessGroup::InProcessGroup(int size) : size_(size), slots_(size) {
  if (size < 1) throw UsageError("InProcessGroup: size must be at least 1");
}

void InProcessGroup::exchange(int rank, std::vector<at::Tensor> deposit,
                              const std::function<void(std::vector<std::vector<at::Tensor>>&)>& combine) {
  std::unique_lock<std::mutex> lk(mu_);
  // Wait for the previous collective's ranks to leave before depositing into the slots.
  cv_.wait(lk, [&] { return leaving_ == 0; });
  const uint64_t gen = generation_;
  slots_[rank] = std::move(deposit);
  if (++arrived_ == size_) {
    combine(slots_);
    arrived_ = 0;
    leaving_ = size_;
    ++generation_;
    cv_.notify_all();
  } else {
    cv_.wait(lk, [&] { return generation_ != gen; });
  }
  slots_[rank].clear();
  if (--leaving_ == 0) cv_.notify_all();
}

void InProcessGroup::exchange_each(int rank, std::vector<at::Tensor> deposit,
                                   const std::function<void(const std::vector<std::vector<at::Tensor>>&)>& mine) {
  exchange(rank, std::move(deposit), [this](std::vector<std::vector<at::Tensor>>& all) { published_ = all; });
  std::vector<std::vector<at::Tensor>> all;
  {
    // Read before this rank joins the next rendezvous: the next publication needs every rank there.
    std::lock_guard<std::mutex> lk(mu_);
    all = published_;
  }
  mine(all);
  exchange(rank, {}, [this](std::vector<std::vector<at::Tensor>>&) { published_.clear(); });
}

InProcessCommunicator::InProcessCommunicator(std::shared_ptr<InProcessGroup> group, int rank)
    : group_(std::move(group)), rank_(rank) {
  if (rank < 0 || rank >= group_->size()) throw UsageError("InProcessCommunicator: rank out of range");
  start();
}

InProcessCommunicator::~InProcessCommunicator() { stop(); }

void InProcessCommunicator::maybe_fail(const char* what) {
  if (run_count_++ == fail_at_.load())
    throw CommError(std::string("inprocess ") + what + " failed on rank " + std::to_string(rank_) +
                    ": injected failure");
}

void InProcessCommunicator::run_allreduce(at::Tensor& t, ReduceOp op) {
  maybe_fail("allreduce");
  const int n = size();
  group_->exchange(rank_, {t}, [op, n](std::vector<std::vector<at::Tensor>>& all) {
    at::Tensor acc = all[0][0].to(at::kDouble);
    for (size_t r = 1; r < all.size(); ++r) {
      at::Tensor x = all[r][0].to(at::kDouble);
      if (op == ReduceOp::Max) acc = at::maximum(acc, x); else acc.add_(x);
    }
    if (op == ReduceOp::Avg) acc.div_(n);
    for (auto& slot : all) slot[0].copy_(acc);
  });
}

void InProcessCommunicator::run_broadcast(at::Tensor& t, int root) {
  maybe_fail("broadcast");
  group_->exchange(rank_, {t}, [root](std::vector<std::vector<at::Tensor>>& all) {
    for (size_t r = 0; r < all.size(); ++r)
      if (static_cast<int>(r) != root) all[r][0].copy_(all[root][0]);
  });
}

void InProcessCommunicator::run_allgather(const at::Tensor& in, at::Tensor& out) {
  maybe_fail("allgather");
  group_->exchange(rank_, {in, out}, [](std::vector<std::vector<at::Tensor>>& all) {
    const int64_t n = all[0][0].numel();
    for (auto& dst : all)
      for (size_t r = 0; r < all.size(); ++r) dst[1].view(-1).narrow(0, r * n, n).copy_(all[r][0].view(-1));
  });
}

void InProcessCommunicator::run_reduce_scatter(at::Tensor& in, at::Tensor& out, ReduceOp op) {
  maybe_fail("reduce_scatter");
  const int n = size();
  const int64_t count = out.numel(), first = rank_ * count;
  group_->exchange_each(rank_, {in}, [&](const std::vector<std::vector<at::Tensor>>& all) {
    // A copy even of a double input: acc is added into, and that input is rank 0's.
    at::Tensor acc = all[0][0].view(-1).narrow(0, first, count).to(at::kDouble, false, /*copy=*/true);
    for (size_t r = 1; r < all.size(); ++r) {
      at::Tensor x = all[r][0].view(-1).narrow(0, first, count).to(at::kDouble);
      if (op == ReduceOp::Max) acc = at::maximum(acc, x); else acc.add_(x);
    }
    if (op == ReduceOp::Avg) acc.div_(n);
    out.view(-1).copy_(acc);
  });
}

void InProcessCommunicator::run_barrier() {
  maybe_fail("barrier");
  group_->exchange(rank_, {}, [](std::vector<std::vector<at::Tensor>>&) {});
}

}  // namespace xlaunch
