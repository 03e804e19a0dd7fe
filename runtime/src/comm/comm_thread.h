// The communication thread of a CPU communicator: one thread runs every collective, in the order
// the collectives were issued, so the issuing thread (backward, the optimizer) keeps computing
// while a bucket is reduced, and every rank's collectives run in the same program order. Each
// collective is logged on the rank's progress board as issued, running and finished (the
// watchdog, watch/watchdog.h, reads it).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "xlaunch/extend/communicator.h"

namespace xlaunch {

// What a collective moves, for the collective log.
struct CollectiveInfo {
  const char* op;
  at::ScalarType dtype = at::kByte;
  int64_t numel = 0;
  static CollectiveInfo of(const char* op, const at::Tensor& t);
  static CollectiveInfo of(const char* op, const std::vector<at::Tensor>& ts);  // as one collective
};

// "float32", "int64", ...: the names users know from PyTorch.
const char* dtype_name(at::ScalarType t);

class CommThread {
 public:
  CommThread() = default;
  ~CommThread() { stop(); }
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // The owner starts the thread once its own state is ready, and stops it (runs what was issued,
  // then joins) before that state goes: ops reach into the owner.
  void start();
  void stop();

  // Runs op on the thread after everything issued before it; the Work rethrows what op threw.
  std::shared_ptr<Work> enqueue(const CollectiveInfo& info, std::function<void()> op);

  // Runs fn on the thread after everything issued before it, and waits for it: for local MPI calls
  // (creating or freeing a sub-communicator, asking its rank) that must not run beside the thread's
  // collectives (MPI is initialised MPI_THREAD_SERIALIZED). Not a collective: it is not logged on
  // the progress board, so it leaves every rank's collective sequence numbers as they are. Runs fn
  // here when the thread is not running (not started yet, or stopped). Never call it on the thread.
  void run_local(const std::function<void()>& fn);

  // Tests and profiling: called on the thread as each collective starts, with its kind
  // ("allreduce", ...) and its sequence number (the rank's, over all its communicators).
  void set_start_observer(std::function<void(const char*, uint64_t)> fn);

 private:
  struct Item;
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Item>> queue_;
  bool stopping_ = false;
  std::function<void(const char*, uint64_t)> observer_;
  std::thread thread_;
};

}  // namespace xlaunch
