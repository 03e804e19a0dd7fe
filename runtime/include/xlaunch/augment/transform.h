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

#include "xlaunch/rng.h"

namespace xlaunch::augment {

// Which samples a batch holds: its rows' ids (the loader gives each sample's dataset index), for
// the draws. ids.size() must equal the batch's rows.
struct BatchKey {
  uint64_t seed = 0;
  int64_t epoch = 0;
  std::vector<int64_t> ids;
};

// The seed of one sample's draws for the transform at `position` of its sequence:
// mix_seed(mix_seed(mix_seed(mix_seed(seed, epoch), id), position)) (rng.h). A pure function of
// those four values, so a sample's parameters do not depend on its batch, its row in it, the number
// of workers or ranks, or the device.
uint64_t sample_seed(uint64_t seed, int64_t epoch, int64_t id, int position);

// Kornia's per-augmentation options. p: the probability that a sample is transformed (the others
// pass unchanged); same_on_batch: one draw for the whole batch, applied to every row: the draw of
// the batch's first row (its id's), `applied` included, as Kornia draws once and repeats it.
// With same_on_batch a sample's parameters depend on which sample leads its batch: still the same
// for any num_workers (the loader's batches are), not for another batch size.
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
// subclass, registered by name below). Transforms are immutable once made: one may be applied from
// several threads at once (the loader's workers).
class Transform {
 public:
  virtual ~Transform() = default;
  // Kornia's class name: "ColorJitter", "RandomAffine", ...
  virtual std::string name() const = 0;
  // The names of the parameter columns, in order (e.g. RandomAffine: angle, translate_x, ...): what
  // Params::values holds, documented by each transform.
  virtual std::vector<std::string> columns() const = 0;
  virtual const Options& options() const = 0;
  // One sample's parameters (columns().size() values into `values`) for an image of height x
  // width, drawn from `rng` in the order the transform documents.
  virtual void sample(Rng& rng, int64_t height, int64_t width, double* values) const = 0;
  // Applies the given parameters to a batch [B, C, H, W] (rows whose `applied` is false are
  // returned as they are). Throws UsageError naming the transform for an image that is not
  // [B, C, H, W] floating point, or parameters of the wrong shape (check_apply below).
  virtual at::Tensor apply(const at::Tensor& images, const Params& params) const = 0;
  // The output's [height, width] for an input of height x width: the same, unless the transform
  // resizes (RandomResizedCrop).
  virtual std::pair<int64_t, int64_t> output_size(int64_t height, int64_t width) const { return {height, width}; }
  // True when row i of apply()'s result depends only on row i of the images and of the params, and
  // apply() keeps the channels and the dtype. Sequential then applies a run of such transforms to a
  // few rows at a time on the CPU, so that the rows stay in the cache from one transform to the
  // next. Every built-in transform is; a user's transform that mixes samples (MixUp, CutMix) keeps
  // the default, false, and gets the whole batch.
  virtual bool row_by_row() const { return false; }

  // Draws the parameters of key.ids.size() samples of an image of height x width. Each row's
  // generator is seeded with sample_seed(key.seed, key.epoch, id, position) and draws first
  // u in [0, 1) (applied = u < p; drawn even when p is 0 or 1, so that p does not shift the
  // parameters), then sample()'s values. same_on_batch: row 0's draw, repeated on every row.
  // `position`: the transform's place in its sequence, so that each transform has its own stream.
  Params draw(const BatchKey& key, int position, int64_t height, int64_t width) const;
};

// For apply(): throws UsageError naming the transform when images is not a floating point
// [B, C, H, W] tensor with C in `channels` (empty: any), or params is not values [B, columns]
// float64 and applied [B] bool, on the CPU.
void check_apply(const Transform& transform, const at::Tensor& images, const Params& params,
                 const std::vector<int64_t>& channels = {});

// The registry (one table, read by the docs and by make()): name -> factory from named numeric
// arguments, spelled as Kornia's keyword arguments ("degrees", "translate", "p", "same_on_batch",
// ...): a number or a tuple of numbers each, booleans as 0 or 1. make() throws UsageError naming
// the transform and the argument for an unknown name or argument (listing the known ones), and for
// a value out of its range (naming the allowed one). The built-in transforms register themselves;
// registering a name twice throws UsageError.
using Args = std::map<std::string, std::vector<double>>;
using Factory = std::function<std::shared_ptr<Transform>(const Args&)>;
void register_transform(const std::string& name, Factory factory);
std::shared_ptr<Transform> make(const std::string& name, const Args& args = {});
std::vector<std::string> registered();

}  // namespace xlaunch::augment
