// Gradient accumulation windows: which micro-step synchronises (and the optimizer steps), and what
// a window's losses are divided by so that its gradients are those of one large batch.
//
// A window is the micro-steps from one optimizer step to the next: the accumulation setting's steps of
// them, or fewer at the end of the training loader's epoch (sync_with_dataloader), after which the
// next epoch starts a new one. Its backwards are of one kind:
//  - backward(loss), loss a mean: divided by the window's length, so a short window at the end of
//    an epoch gives the mean over its own micro-batches (plan_micro_step).
//  - backward(loss_sum, num_items): the gradients at the sync step are those of
//    (sum of every rank's loss_sums of the window) / (sum of every rank's num_items of the window),
//    which is unknown until the window's last backward. So (ItemWindow):
//      1. every micro-step backpropagates loss_sum / d, d = the previous window's items per rank
//         (1 in the first window): gradients then have the size a mean loss gives them, which the
//         GradScaler's scale and the 16-bit communication hooks are tuned to;
//      2. at the sync backward one allreduce of two numbers gives the window's total N over the
//         ranks (before backward, so a total of 0 fails on every rank before any bucket moves);
//      3. the reducer averages over W ranks, so the gradients hold sum_r G_r / (W d), and one pass
//         multiplies them by W d / N (none when that is 1: windows of equal totals). Under fp16 the
//         gradients are still scaled by the GradScaler's S, which the pass leaves alone: inf and
//         NaN stay what they are, and the step is skipped as without accumulation.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace xlaunch {

class Communicator;

// One micro-step (Accelerator::accumulate), decided from where it falls.
struct MicroStep {
  bool sync = true;           // it synchronises the gradients; the prepared optimizers step
  int64_t window_length = 1;  // the micro-steps of its window: what backward(loss) divides by
  int64_t next_done = 0;      // micro-steps done in the window after it (0: the next starts one)
};

// done: micro-steps of the window before this one (what the last call returned as next_done).
// steps: the accumulation steps set (>= 1). batches_left: the training loader's batches after the
// one this micro-step trains on, or -1 when that is not known (no loader prepared, none begun, or
// sync_with_dataloader off). Assumes one micro-step per batch for the window's length; a micro-step
// on an epoch's last batch always syncs and ends its window.
MicroStep plan_micro_step(int64_t done, int64_t steps, int64_t batches_left);

// The state of one accumulation window on this rank: which kind of backward it holds, and for
// backward(loss_sum, num_items) the items so far and the divisor of step 1 above.
class ItemWindow {
 public:
  explicit ItemWindow(int world) : world_(world), reference_(world) {}

  // A backward(loss) of this window. Throws UsageError when the window holds num_items backwards.
  // sync: it is the window's last backward.
  void add_mean(bool sync);
  // A backward(loss_sum, num_items) of this window, before it runs. A number that is negative or
  // not finite is kept to be reported by close() on every rank (so no rank is left waiting in its
  // allreduce); a tensor is summed where it lies, with no host synchronisation. Throws UsageError
  // for a tensor that is not 0-dim, or when the window holds backward(loss) calls.
  void add_items(double n);
  void add_items(const at::Tensor& n);

  // What this backward's loss_sum is divided by (step 1).
  double divisor() const { return reference_ / world_; }

  // At the window's sync backward, before it runs; collective (one allreduce of two doubles on
  // `comm`, skipped for a world of one). Reads this rank's items on the host (one synchronisation
  // when some came as device tensors), sums them over the ranks, and returns the factor of step 3,
  // starting the next window. Throws UsageError on every rank when the total is 0, or when some
  // rank's num_items were negative or not finite.
  double close(Communicator& comm);

  // The previous window's total over every rank (the world size before the first window): what
  // the divisor comes from, saved in checkpoints so that a resumed run divides as the original.
  double reference() const { return reference_; }
  void set_reference(double total) { reference_ = total; }

 private:
  void reset();

  int world_;
  double reference_;
  double host_items_ = 0;   // from numbers
  at::Tensor device_items_; // from tensors, float64 on their device; undefined when none came
  std::string bad_;         // the first negative or non-finite num_items of this window, said
  int64_t item_backwards_ = 0, mean_backwards_ = 0;
};

// grads[i] *= factor, in place, one fused pass per device and dtype (undefined ones skipped).
void scale_gradients(const std::vector<at::Tensor>& grads, double factor);

}  // namespace xlaunch
