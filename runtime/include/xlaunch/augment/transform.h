// The augmentation interface (augment.h has the overview): what a batch's draws are keyed by, the
// per-transform options, the parameters of a batch, the Transform every augmentation implements,
// and the registry of transforms by Kornia's names.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace xlaunch::augment {

// Which samples a batch holds: its rows' ids (the loader gives each sample's dataset index), for
// the draws. ids.size() must equal the batch's rows.
struct BatchKey {
  uint64_t seed = 0;
  int64_t epoch = 0;
  std::vector<int64_t> ids;
};

// Kornia's per-augmentation options. p: the probability that a sample is transformed (the
// others pass unchanged); same_on_batch: one draw for the whole batch (the first row's), applied
// to every sample it selects.
struct Options {
  double p = 1.0;
  bool same_on_batch = false;
};

// One transform's parameters for a batch: `values` [B, columns().size()] float64 on the CPU, row i
// the parameters drawn for sample i (or given by a test); `applied` [B] bool on the CPU: drawn with
// probability p.
struct Params {
  at::Tensor values;
  at::Tensor applied;
};

// The interface every augmentation implements (the extension point: a user's own transform is a
// subclass, registered by name below).
class Transform {
 public:
  virtual ~Transform() = default;
  // Kornia's class name: "ColorJitter", "RandomAffine", ...
  virtual std::string name() const = 0;
  // The names of the parameter columns, in order (e.g. RandomAffine: angle, translate_x, ...): what
  // Params::values holds, documented by each transform.
  virtual std::vector<std::string> columns() const = 0;
  virtual const Options& options() const = 0;
  // Draws the parameters of key.ids.size() samples of an image of height x width from `key` (p and
  // same_on_batch included). `position`: the transform's place in its sequence, mixed into the
  // seed so that each transform has its own stream.
  virtual Params draw(const BatchKey& key, int position, int64_t height, int64_t width) const = 0;
  // Applies the given parameters to a batch (rows whose `applied` is false are returned as they
  // are). Throws UsageError naming the transform for an image that is not [B, C, H, W] floating
  // point, or parameters of the wrong shape.
  virtual at::Tensor apply(const at::Tensor& images, const Params& params) const = 0;
};

// The registry (one table, read by the docs and by make()): name -> factory from named numeric
// arguments, spelled as Kornia's keyword arguments ("degrees", "translate_x", "p",
// "same_on_batch", ...). Throws UsageError naming the transform and the argument for an unknown
// name or argument, listing the known ones.
using Args = std::map<std::string, std::vector<double>>;
using Factory = std::function<std::shared_ptr<Transform>(const Args&)>;
void register_transform(const std::string& name, Factory factory);
std::shared_ptr<Transform> make(const std::string& name, const Args& args = {});
std::vector<std::string> registered();

}  // namespace xlaunch::augment
