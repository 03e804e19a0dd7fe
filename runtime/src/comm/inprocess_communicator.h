// Ranks as threads of one process: InProcessGroup(n) holds the shared state, and each thread uses
// its own InProcessCommunicator(group, rank). Same contract and same communication-thread model
// as MpiCommunicator, so the reducer, the scaler and the sampler logic are testable in one
// GoogleTest process. Error injection: fail_at(seq) makes this rank's seq-th collective throw.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "comm/threaded_communicator.h"

namespace xlaunch {

class InProcessGroup {
 public:
  explicit InProcessGroup(int size);
  int size() const { return size_; }

  // Rendezvous of all ranks for one collective: each deposits its tensors, the last to arrive
  // runs `combine` over all deposits, then every rank leaves. Collectives of a group complete in
  // the order they are issued, as for MPI.
  void exchange(int rank, std::vector<at::Tensor> deposit,
                const std::function<void(std::vector<std::vector<at::Tensor>>&)>& combine);

  // Rendezvous where every rank does its own part: once all ranks have deposited, each runs `mine`
  // over all deposits on its own thread (concurrently with the others), and none leaves before
  // every rank has finished, so that no deposit changes while another rank reads it.
  void exchange_each(int rank, std::vector<at::Tensor> deposit,
                     const std::function<void(const std::vector<std::vector<at::Tensor>>&)>& mine);

 private:
  int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<at::Tensor>> slots_;
  int arrived_ = 0;
  int leaving_ = 0;
  uint64_t generation_ = 0;
  std::vector<std::vector<at::Tensor>> published_;  // exchange_each's deposits, under mu_
};

class InProcessCommunicator final : public ThreadedCommunicator {
 public:
  InProcessCommunicator(std::shared_ptr<InProcessGroup> group, int rank);
  ~InProcessCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string name() const override { return "inprocess"; }

  // The collective with this sequence number (0-based, in issue order) fails on this rank.
  void fail_at(int64_t seq) { fail_at_ = seq; }

 protected:
  void run_allreduce(at::Tensor& t, ReduceOp op) override;
  void run_broadcast(at::Tensor& t, int root) override;
  void run_allgather(const at::Tensor& in, at::Tensor& out) override;
  void run_barrier() override;
  // Each rank reduces its own chunk of every rank's input (in double, as run_allreduce does, so
  // that the two agree bitwise).
  void run_reduce_scatter(at::Tensor& in, at::Tensor& out, ReduceOp op) override;

 private:
  void maybe_fail(const char* what);
  std::shared_ptr<InProcessGroup> group_;
  int rank_;
  std::atomic<int64_t> fail_at_{-1};
  int64_t run_count_ = 0;
};

}  // namespace xlaunch
