// zero_stage 3 (FSDP's FULL_SHARD, docs/memory.md): stage 2, and between uses each rank keeps only
// its shard of every bucket's flat parameters. A bucket here is a unit of the model (ddp/units.h).
//
// Per bucket: `shard`, this rank's ceil(E / W) elements, persistent, which the optimizer steps; and
// `whole`, W * shard elements, whose storage exists only while the unit is gathered. The members'
// parameters keep their identity (the module, the user's code and autograd hold them): while
// gathered they are views of `whole`; while free they keep their shape as broadcast views of one
// zero, so shapes, dims and element counts stay right (parameter groups built by shape), reading
// one gives zeros, never freed memory, and writing into one is refused by PyTorch. Freeing releases the storage itself, not only the
// parameters' hold on it, so what autograd saved of them (a transposed weight, say) goes too, and
// sees the gathered values again once the unit is gathered for its backward: gathering writes into
// the same storage, and no version counter moves.
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <c10/core/StorageImpl.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "check.h"
#include "ddp/stages/stage2.h"

namespace xlaunch {
namespace {

class Stage3 final : public Stage2 {
 public:
  using Stage2::Stage2;
  int stage() const override { return 3; }
  // A unit is one bucket, whatever its size (ddp/units.h gives the plan).
  bool alone_from_cap() const override { return false; }
  std::shared_ptr<Work> start(ReducerBucket& bucket, CommHook& hook) override {
    std::shared_ptr<Work> work = Stage2::start(bucket, hook);
    // Its gradients are in the reduce-scatter's input now: the unit's backward is over.
    free_unit(bucket, /*keep_changes=*/false);
    return work;
  }
  void backward_over() override {
    // A backward without sync reduce-scattered nothing: its units are freed here.
    for (ReducerBucket& bucket : ctx_.buckets) free_unit(bucket, false);
  }
  at::Tensor param_piece(const ReducerBucket& bucket, int64_t offset, int64_t length) const override {
    const int64_t begin = bucket.shard * bucket.shard_comm->rank();
    XLAUNCH_ASSERT(offset >= begin && offset + length <= begin + bucket.shard, "a piece inside this rank's shard");
    return units_[bucket.index].shard.narrow(0, offset - begin, length);
  }
  // After the optimizer's step the whole parameters are stale: nothing is gathered, they go.
  std::shared_ptr<Work> gather_params(ReducerBucket& bucket) override {
    free_unit(bucket, false);
    return completed_work();
  }
  void gather_unit(ReducerBucket& bucket, bool exact) override;
  void wait_unit(ReducerBucket& bucket) override {
    Unit& unit = units_[bucket.index];
    if (!unit.gathering) return;
    unit.gathering->wait();
    unit.gathering.reset();
  }
  void free_unit(ReducerBucket& bucket, bool keep_changes) override;
  bool unit_whole(const ReducerBucket& bucket) const override { return units_[bucket.index].whole_now; }
  int64_t gathered_element_size(const ReducerBucket& bucket) const override {  // in the policy's dtype
    const Unit& unit = units_[bucket.index];
    return static_cast<int64_t>((unit.whole_low.defined() ? unit.whole_low : unit.whole).element_size());
  }
  std::string describe(const ReducerBucket& bucket) const override {
    return ", zero stage 3 unit: " + std::to_string(bucket.shard_comm->size()) + " shards of " + std::to_string(bucket.shard);
  }

 protected:
  void place_params(ReducerBucket& bucket) override;

 private:
  struct Unit {
    at::Tensor shard;
    at::Tensor whole;
    at::Tensor zero;  // one element, 0-dim: what a free parameter is a broadcast view of
    // With the mixed-precision policy (fsdp.param_dtype): the shard cast to it, what is gathered,
    // and the whole parameters in it.
    at::Tensor shard_low, whole_low;
    std::shared_ptr<Work> gathering;
    bool whole_now = false;
    bool low_now = false;  // whole in the policy's dtype (whole_low), not the parameters' own
  };
  // The policy's dtype, or nullopt: gathered in the parameters' own.
  std::optional<at::ScalarType> low() const {
    if (ctx_.options.fsdp_param_dtype == "bf16") return at::kBFloat16;
    if (ctx_.options.fsdp_param_dtype == "fp16") return at::kHalf;
    return std::nullopt;
  }
  // Points the members' parameters at `whole` (views), or at broadcast views of `zero` (free).
  void bind(const ReducerBucket& bucket, bool whole);
  std::vector<Unit> units_;
};

// The storage under `t` gets `bytes` of fresh memory from its own allocator, or none.
void set_storage_bytes(const at::Tensor& t, size_t bytes) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  if (bytes == 0) storage->set_data_ptr_noswap(c10::DataPtr(nullptr, t.device()));
  else storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
}

void Stage3::place_params(ReducerBucket& bucket) {
  const std::vector<size_t>& ids = members(bucket);
  const at::TensorOptions options = ctx_.params[ids.front()].options().requires_grad(false);
  Unit unit;
  // The shard is allocated by the communicator (over shared memory the others read it where it lies);
  // the whole parameters by the device's own allocator, whose memory a free gives back. Made free:
  // the shard takes this rank's part of the parameters as they are, which then let go of their own
  // memory, so the model is never whole twice.
  unit.shard = bucket.shard_comm->allocate(bucket.shard, options);
  unit.whole = at::empty({bucket.shard * bucket.shard_comm->size()}, options);
  set_storage_bytes(unit.whole, 0);
  if (const auto dtype = low()) {
    unit.shard_low = bucket.shard_comm->allocate(bucket.shard, options.dtype(*dtype));  // collective, as the shard
    unit.whole_low = at::empty({bucket.shard * bucket.shard_comm->size()}, options.dtype(*dtype));
    set_storage_bytes(unit.whole_low, 0);
  }
  unit.zero = at::zeros({}, options);
  at::NoGradGuard no_grad;
  const int64_t begin = bucket.shard * bucket.shard_comm->rank(), end = begin + bucket.shard;
  unit.shard.zero_();  // padding
  int64_t offset = 0;
  for (size_t i : ids) {
    const int64_t n = numel_of(i);
    const int64_t from = std::max(begin, offset), to = std::min(end, offset + n);
    if (to > from) unit.shard.narrow(0, from - begin, to - from).copy_(ctx_.params[i].reshape({-1}).narrow(0, from - offset, to - from));
    offset += n;
  }
  units_.push_back(std::move(unit));
  bind(bucket, false);
}

void Stage3::bind(const ReducerBucket& bucket, bool whole) {
  const Unit& unit = units_[bucket.index];
  const at::Tensor& source = unit.low_now ? unit.whole_low : unit.whole;
  at::NoGradGuard no_grad;
  int64_t offset = 0;
  for (size_t i : members(bucket)) {
    at::Tensor& param = ctx_.params[i];
    const bool retyped = param.scalar_type() != (whole ? source : unit.zero).scalar_type();
    if (whole) param.set_data(bucket_alias(source, offset, sizes_[i]));
    else param.set_data(unit.zero.expand(sizes_[i]));
    // A change of dtype gives the parameter a new gradient accumulator: the reducer hooks it, for
    // the graph this gather is for (the old one lives on in graphs that reach it).
    if (retyped && whole) ctx_.rehook(i);
    offset += numel_of(i);
  }
}

void Stage3::gather_unit(ReducerBucket& bucket, bool exact) {
  Unit& unit = units_[bucket.index];
  if (unit.whole_now && !(exact && unit.low_now)) return;
  // Whole in the policy's dtype and wanted exact (a checkpoint after a forward without backward,
  // whose root stays gathered): gathered again, exactly.
  if (unit.whole_now) free_unit(bucket, false);
  unit.low_now = unit.whole_low.defined() && !exact;
  at::Tensor& whole = unit.low_now ? unit.whole_low : unit.whole;
  const at::Tensor& shard = unit.low_now ? unit.shard_low : unit.shard;
  set_storage_bytes(whole, static_cast<size_t>(whole.numel()) * whole.element_size());
  bind(bucket, true);
  unit.whole_now = true;
  if (unit.low_now) unit.shard_low.copy_(unit.shard);
  if (bucket.shard_comm->size() == 1) whole.copy_(shard);
  else unit.gathering = bucket.shard_comm->allgather_async(shard, whole);
}

void Stage3::free_unit(ReducerBucket& bucket, bool keep_changes) {
  Unit& unit = units_[bucket.index];
  if (!unit.whole_now) return;
  wait_unit(bucket);
  XLAUNCH_ASSERT(!keep_changes || !unit.low_now, "a unit whole in its own dtype when its shard takes its values");
  if (keep_changes) unit.shard.copy_(unit.whole.narrow(0, bucket.shard * bucket.shard_comm->rank(), bucket.shard));
  bind(bucket, false);
  set_storage_bytes(unit.low_now ? unit.whole_low : unit.whole, 0);
  unit.whole_now = false;
  unit.low_now = false;
}

}  // namespace

std::unique_ptr<StageStrategy> make_zero_stage_3(StageContext ctx) { return std::make_unique<Stage3>(ctx); }

}  // namespace xlaunch
