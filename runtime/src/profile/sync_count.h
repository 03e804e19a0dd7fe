// Host-device synchronisations counted per optimizer step (docs/performance.md#host-device-syncs).
// With debug: true on a GPU (XLAUNCH_DEBUG=1 and the Accelerator on CUDA) the Accelerator turns on
// c10's CUDA sync debug mode at warning level: every call that makes the host wait for the GPU
// (.item(), printing a tensor, a copy to the CPU, nonzero, a stream or device synchronize) then
// raises c10's warning "called a synchronizing CUDA operation". A SyncCounter, installed as the
// training thread's c10 warning handler, takes those warnings instead of printing them, counts them
// per step, and keeps where the first ones came from; every other warning goes on to the handler
// that was there before. The counts go to the rank's syncs-<rank> file (status/sync_stats.h), and
// `xlaunch run`'s report prints them with the advice to remove them.
//
// Some syncs are the runtime's own, made where it must read a device value on the host: fp16 loss
// scaling's inf/NaN check (GradScaler::step), the norm clip_grad_norm_ returns as a number, the
// num_items tensors' sum read once per window (acc.backward(loss_sum, num_items)). Each is made
// inside a RuntimeSync, and counted apart (SyncStats' runtime_ fields): the report says what they
// are instead of telling the user to remove them. (The reducer's control word waits on a CUDA
// event a step old, which c10 does not report as a sync.)
//
// Syncs in backward: the autograd engine runs a CUDA backward's nodes on its device thread, under
// a handler that keeps their warnings, and replays them on the thread that called backward once it
// is done (torch/csrc/autograd/engine.cpp, Engine::execute). They are counted there, in the step of
// that backward, and their place is the replay's: the engine's frames called from the backward.
//
// c10's warning handlers are per thread: the runtime's own threads that work for the training (the
// loader's workers, the communication thread) install the counter on themselves (CountedThread),
// so their syncs are counted in the step in progress too, and a recorded site names the thread. A
// thread of the program's own is counted once it makes a CountedThread; until then c10 prints its
// warning for each of its syncs.
#pragma once

#include <c10/util/Exception.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <string>

#include "xlaunch/status/sync_stats.h"

namespace xlaunch::profile::syncs {

// The text of c10's warning for a synchronising CUDA call (c10/cuda/CUDAFunctions.cpp,
// warn_or_error_on_sync, PyTorch 2.x).
inline constexpr const char* kSyncWarningText = "called a synchronizing CUDA operation";

// Whether `w` is c10's sync debug warning.
bool is_sync_warning(const c10::Warning& w);

// Marks, on this thread, the syncs the runtime itself makes until it goes out of scope: a sync
// warning raised inside is counted as the runtime's, under `what` (a literal: what the sync is, and
// the setting that avoids it where one does). Nested scopes: the innermost names it. Always
// constructed, counting or not: two thread-local stores.
class RuntimeSync {
 public:
  explicit RuntimeSync(const char* what);
  ~RuntimeSync();
  RuntimeSync(const RuntimeSync&) = delete;
  RuntimeSync& operator=(const RuntimeSync&) = delete;

 private:
  const char* outer_;
};

// The innermost RuntimeSync's `what` on this thread; null outside any.
const char* runtime_sync();

// Where a synchronising call came from, from c10::get_backtrace's text (lines "frame #N: SYMBOL +
// 0xOFF (0xADDR in MODULE)", innermost first): the outermost ATen operator of the frames in
// LibTorch's libraries (libtorch*, libc10*), such as "at::_ops::item::call", or their outermost
// frame without one, then the first frame outside them, which called it: "SYMBOL (in MODULE)", or
// "MODULE+0xOFF" when the symbol is not exported (`addr2line -f -C -e MODULE 0xOFF` names the
// line). Argument lists are left out. "" when no frame is in LibTorch's libraries.
std::string describe_sync_site(const std::string& backtrace);

class SyncCounter final : public c10::WarningHandler {
 public:
  // Counts into `stats` (the rank's file, or memory) and passes every other warning to `next`.
  // Prints the first sync after the warm-up when `announce` (rank 0).
  SyncCounter(SyncStats* stats, c10::WarningHandler* next, bool announce);

  // A sync warning: counted in the step in progress, as the runtime's inside a RuntimeSync (a new
  // kind's `what` noted), else as the training loop's; the loop's first of the run and first after
  // the warm-up also record where they came from (a backtrace, symbolised: some milliseconds,
  // twice per run). Any other warning: to `next`.
  void process(const c10::Warning& w) override;

  // The optimizer step ended: its count goes into the stats, published under their sequence lock.
  void step_done();

 private:
  void record(SyncSite& site, const c10::Warning& w, uint64_t step);
  void note_runtime(const char* what, uint64_t step);

  std::mutex record_mu_;  // one thread at a time records a site or a runtime kind (several count)
  SyncStats* stats_;
  c10::WarningHandler* next_;
  bool announce_;
  std::atomic<uint64_t> in_step_{0};          // the loop's syncs of the step in progress
  std::atomic<uint64_t> runtime_in_step_{0};  // the runtime's
};

// Turns counting on for this process: c10's CUDA sync debug mode at warning level, and a
// SyncCounter as the calling thread's c10 warning handler (call it on the training thread, as the
// Accelerator's constructor is), counting into dir/syncs-<rank> (in memory when dir is empty or
// cannot be written: then nothing reaches the report). Once per process: later calls return the
// same counter. The mode and the handler stay until the process ends.
SyncCounter* start(const std::string& dir, int rank);

// The counter start() made; null before.
SyncCounter* counter();

// The step clock's end of an optimizer step (step_clock.cpp): the counter's step_done, when counting.
void step_done();

// While it lives, the syncs of the thread that made it are counted by `counter` (the process's,
// when start() ran; nothing is done without one): made first thing on each of the runtime's own
// threads that work for the training. `role` (a literal) names the thread in a recorded site:
// "at::_ops::item::call called from ... (on the loader's worker thread)". Its other warnings go to
// the counter's next handler (c10's base handler, which prints them, unless the training thread
// had installed another before start()).
class CountedThread {
 public:
  explicit CountedThread(const char* role, SyncCounter* counter = syncs::counter());
  ~CountedThread();
  CountedThread(const CountedThread&) = delete;
  CountedThread& operator=(const CountedThread&) = delete;

 private:
  std::optional<c10::WarningUtils::WarningHandlerGuard> guard_;  // the thread's handler given back at the end
  const char* outer_role_;
};

}  // namespace xlaunch::profile::syncs
