// Loss scaling for float16 training, with the same semantics as torch.amp.GradScaler, plus one
// rule for data parallelism: every rank skips the same steps and holds the same scale.
//
// float16 gradients of small losses underflow to zero. The scaler multiplies the loss by a large
// factor S before backward, divides the gradients by S before the optimizer step, and skips the
// step when any gradient came out inf or NaN (S was too large), halving S. After
// growth_interval clean steps in a row it doubles S again. Per step:
//
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);        // optional: only to look at true gradients (clip_grad_norm_)
//   scaler.step(opt);            // unscales if not yet done; steps unless a gradient is inf/NaN
//   scaler.update();             // adjusts S from what step() saw
//
// With bf16 or no mixed precision, construct it with enabled=false: scale() returns the loss,
// unscale_() does nothing, step() is optimizer.step(), update() does nothing.
//
// Where S lives: on the host, as a float. step() must bring the inf/NaN verdict to the host
// anyway (skipping optimizer.step() is host control flow), so the host knows S exactly at every
// point and passes it to the kernels by value; scale() and unscale_() add no synchronisation.
//
// Across ranks: when a Communicator of more than one rank is given, unscale_() reduces the
// found-inf flag with Max over all ranks, so every rank decides alike even when a non-finite
// value exists on one rank only (for example a gradient outside DDP's averaged buckets). The
// communicator must accept a float32 tensor on the gradients' device (MPI for CPU gradients,
// NCCL for CUDA ones; an optimizer without gradients on this rank sends a flag on its parameters'
// device), and every rank must call unscale_()/step() for the same optimizers in the same order,
// as for any collective.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace xlaunch {

class Communicator;

// Multiplies every tensor by inv_scale in place (computed in float32, as PyTorch does) and
// returns a float32 tensor of shape [1] on the device of the first defined tensor (CPU when there
// is none): 1 if any element of any tensor was inf or NaN before scaling, else 0. Undefined
// tensors are skipped. Tensors are grouped by (device, dtype), and each contiguous float32,
// float16 or bfloat16 group is one fused pass (the kernels/ CPU reference on CPU tensors, one
// CUDA launch per group on CUDA tensors, on the current stream); other dtypes, non-contiguous
// tensors and other devices take a slower path through ATen ops. Does not synchronise with a GPU.
// This is the helper for code that unscales tensors itself; a GradScaler user calls
// GradScaler::unscale_ instead, which also records that the step's gradients are unscaled.
at::Tensor unscale_and_check_(const std::vector<at::Tensor>& tensors, double inv_scale);

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;     // must be > 1
  double backoff_factor = 0.5;    // must be in (0, 1)
  int64_t growth_interval = 2000; // clean steps before the scale grows; must be >= 1
  bool enabled = true;
};

// Everything update() carries from one step to the next: what state_dict() returns and
// load_state_dict() takes. The field names are those of torch.amp.GradScaler.state_dict()
// ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"), so a
// checkpoint writer can store them as named scalars.
struct GradScalerState {
  double scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int64_t growth_tracker = 0;  // clean steps in a row since the scale last changed
};

class GradScaler {
 public:
  // Throws UsageError when an option is out of range, naming it. `comm` may be null (one rank).
  // `device`: where `comm` reduces, for the verdict of a rank whose optimizer holds no parameter
  // here (at ZeRO stages 1 and 2 a small optimizer's shard can be empty on some ranks).
  explicit GradScaler(GradScalerOptions options = {}, std::shared_ptr<Communicator> comm = nullptr,
                      at::Device device = at::kCPU);

  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // loss * S, in float32 (a float16 loss is widened first, so S cannot overflow it). Disabled:
  // the loss itself.
  at::Tensor scale(const at::Tensor& loss) const;

  // Divides the gradients of `optimizer`'s parameters by S and records whether any was inf or
  // NaN (reduced across ranks, see above). At most once per optimizer between update()s: a
  // second call, or a call after step(), throws UsageError. Disabled: does nothing.
  void unscale_(torch::optim::Optimizer& optimizer);

  // Whether unscale_() already ran for `optimizer` since the last update(): the gradients now
  // hold true values (for clip_grad_norm_, which must unscale first exactly once).
  bool is_unscaled(const torch::optim::Optimizer& optimizer) const;

  // Unscales if unscale_() was not called, then calls optimizer.step() unless a gradient was
  // non-finite. Returns whether the optimizer stepped. Reads the verdict on the host (one
  // device synchronisation). Disabled: optimizer.step(), returns true. Throws UsageError when
  // called twice for one optimizer between update()s.
  bool step(torch::optim::Optimizer& optimizer);
  // The same, stepping through step_fn instead of optimizer.step() (the prepared optimizer's fused
  // step, optimizer.fused).
  bool step(torch::optim::Optimizer& optimizer, const std::function<void()>& step_fn);

  // Whether the most recent step() skipped the optimizer (false before any step, and always
  // false when disabled).
  bool last_step_skipped() const { return last_step_skipped_; }
  // Steps skipped since construction (or load_state_dict).
  int64_t skipped_steps() const { return skipped_steps_; }

  // Once per iteration, after every step(): S *= backoff_factor if any optimizer saw inf/NaN,
  // else counts a clean step and S *= growth_factor every growth_interval clean steps (unless
  // that would overflow float32). Forgets the per-optimizer unscale/step records. Throws
  // UsageError when no step() or unscale_() ran since the last update(). Disabled: nothing.
  void update();

  // The current S (1.0 when disabled). The gradients are multiplied by float(1 / S).
  double get_scale() const { return options_.enabled ? scale_ : 1.0; }
  int64_t growth_tracker() const { return growth_tracker_; }

  GradScalerState state_dict() const;
  // Restores S, the factors and the growth tracker (the factors are validated as options are).
  void load_state_dict(const GradScalerState& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    at::Tensor found_inf;  // float32 [1], already reduced across ranks
    int found_on_host = -1;  // found_inf read by step(): 0 or 1; -1 while not read
  };

  float inv_scale() const;
  PerOptimizer& record(const torch::optim::Optimizer& optimizer);

  GradScalerOptions options_;
  std::shared_ptr<Communicator> comm_;
  at::Device device_;
  float scale_;  // float32, as torch keeps it, so growth and backoff round identically
  int64_t growth_tracker_ = 0;
  bool last_step_skipped_ = false;
  int64_t skipped_steps_ = 0;
  std::unordered_map<const torch::optim::Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace xlaunch
