#include "xlaunch/sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randperm.h>

#include <algorithm>
#include <string>

#include "xlaunch/error.h"

namespace xlaunch {
namespace {

void check_options(const SamplerOptions& o) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size)
    throw UsageError("DistributedSampler: rank " + std::to_string(o.rank) + " is not in a world of " +
                     std::to_string(o.world_size) + " ranks; pass the rank and world size of this "
                     "process (Accelerator does this for prepared loaders)");
  if (o.dataset_size < 0)
    throw UsageError("DistributedSampler: the dataset size " + std::to_string(o.dataset_size) +
                     " is negative");
}

void check_offset(const SamplerOptions& o, int64_t offset) {
  if (offset < 0 || offset > o.dataset_size)
    throw UsageError("DistributedSampler: the epoch cannot start at global position " + std::to_string(offset) +
                     " of a dataset of " + std::to_string(o.dataset_size) + " samples; pass the positions "
                     "already read, 0 to " + std::to_string(o.dataset_size));
}

// The epoch's global order before padding: PyTorch's randperm(n, generator(seed + epoch)), so a
// Python and a C++ job with the same seed read the same samples.
std::vector<int64_t> global_order(const SamplerOptions& o, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(o.dataset_size));
  if (!o.shuffle) {
    for (int64_t i = 0; i < o.dataset_size; ++i) order[i] = i;
    return order;
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed + static_cast<uint64_t>(epoch));
  const at::Tensor perm = at::randperm(o.dataset_size, gen, at::kLong);
  const int64_t* p = perm.data_ptr<int64_t>();
  order.assign(p, p + o.dataset_size);
  return order;
}

}  // namespace

int64_t shard_size(const SamplerOptions& o, int64_t offset) {
  check_options(o);
  check_offset(o, offset);
  const int64_t w = o.world_size, remaining = o.dataset_size - offset;
  if (o.drop_last) return remaining / w;
  if (!o.even_batches) return std::max<int64_t>(0, remaining - o.rank + w - 1) / w;  // positions < n only
  return (remaining + w - 1) / w;
}

std::vector<int64_t> shard_indices(const SamplerOptions& o, int64_t epoch, int64_t offset) {
  const int64_t local = shard_size(o, offset);
  std::vector<int64_t> out;
  if (local == 0) return out;
  const std::vector<int64_t> order = global_order(o, epoch);
  const int64_t n = o.dataset_size;
  out.reserve(static_cast<size_t>(local));
  for (int64_t j = 0; j < local; ++j) {
    const int64_t p = offset + j * o.world_size + o.rank;  // global position
    out.push_back(order[static_cast<size_t>(p % n)]);  // p >= n: padding, wrapping around
  }
  return out;
}

DistributedSampler::DistributedSampler(SamplerOptions options) : options_(options) {
  check_options(options_);
}

void DistributedSampler::set_offset(int64_t offset) {
  check_offset(options_, offset);
  offset_ = offset;
}

std::vector<int64_t> DistributedSampler::indices() const { return shard_indices(options_, epoch_, offset_); }

int64_t DistributedSampler::shard_size() const { return xlaunch::shard_size(options_, offset_); }

int64_t DistributedSampler::padding() const {
  if (options_.drop_last || !options_.even_batches) return 0;
  return offset_ + shard_size() * options_.world_size - real_positions();
}

int64_t DistributedSampler::real_positions() const {
  return options_.drop_last ? offset_ + shard_size() * options_.world_size : options_.dataset_size;
}

}  // namespace xlaunch
