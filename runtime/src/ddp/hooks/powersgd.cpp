// comm_hook powersgd: each floating-point bucket through PowerSGD (ddp/powersgd.h) once
// ddp.powersgd_start_step synced backwards were averaged exactly (the first steps move the most);
// other buckets, and every bucket before then, averaged as they are.
//
// Checkpoint state, per PowerSGD bucket b: "bucket.<b>.q" (the warm start, the same on every rank)
// and "bucket.<b>.error.<k>" (this rank's error feedback). In a job of another world size the
// errors belong to other shards of the data and restart from zero; q carries over.
#include <algorithm>
#include <cstdio>

#include "ddp/powersgd.h"
#include "xlaunch/error.h"
#include "xlaunch/extend/comm_hook.h"

namespace xlaunch {
namespace {

// The second half of a started PowerSGD bucket: waiting completes it.
class CompleteOnWait final : public Work {
 public:
  explicit CompleteOnWait(PowerSgdBucket* bucket) : bucket_(bucket) {}
  void wait() override { bucket_->complete(); }

 private:
  PowerSgdBucket* bucket_;
};

// saved's entries under "bucket.<b>.", without that prefix.
NamedTensors of_bucket(const NamedTensors& saved, size_t b) {
  const std::string prefix = "bucket." + std::to_string(b) + ".";
  NamedTensors out;
  for (const auto& [name, t] : saved)
    if (name.rfind(prefix, 0) == 0) out.emplace_back(name.substr(prefix.size()), t);
  return out;
}

class PowerSgdHook final : public CommHook {
 public:
  PowerSgdHook(int rank, int64_t start_step) : rank_(rank), start_step_(start_step) {}
  std::string reduce_scatter_refusal() const override {
    return "PowerSGD approximates each whole gradient matrix by low-rank factors that every rank allreduces, "
           "while a reduce-scatter leaves each rank only its shard of the gradients: there is no matrix to "
           "approximate";
  }

  void add_bucket(const GradBucket& bucket) override {
    if (buckets_.size() <= bucket.index) buckets_.resize(bucket.index + 1);
    const at::ScalarType t = bucket.buffer.scalar_type();
    if (t == at::kFloat || t == at::kDouble)
      buckets_[bucket.index] =
          std::make_unique<PowerSgdBucket>(bucket.views, bucket.comm, rank_, /*seed=*/0x5eed0000u + bucket.index);
  }
  void begin_step(int64_t sync_steps) override { active_ = sync_steps >= start_step_; }
  std::shared_ptr<Work> start(const GradBucket& bucket) override {
    PowerSgdBucket* p = bucket.index < buckets_.size() ? buckets_[bucket.index].get() : nullptr;
    if (!active_ || !p) return bucket.comm->allreduce_async(bucket.buffer, ReduceOp::Avg);
    p->start();
    return std::make_shared<CompleteOnWait>(p);
  }
  // The second round (Q) of every bucket before waiting for any: they travel together.
  void all_started() override {
    if (!active_) return;
    for (auto& p : buckets_)
      if (p) p->exchange();
  }

  NamedTensors state() const override {
    NamedTensors out;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      if (!buckets_[b]) continue;
      for (auto& [name, t] : buckets_[b]->state()) out.emplace_back("bucket." + std::to_string(b) + "." + name, t);
    }
    return out;
  }
  NamedTensors state_for_world(NamedTensors saved, int saved_world, int world, std::string* note) const override {
    note->clear();
    if (saved_world == world) return saved;
    saved.erase(std::remove_if(saved.begin(), saved.end(),
                               [](const auto& e) { return e.first.find(".error.") != std::string::npos; }),
                saved.end());
    *note = "PowerSGD's error feedback was saved by " + std::to_string(saved_world) + " processes; with " +
            std::to_string(world) + " it restarts from zero (warm start and step count restored)";
    return saved;
  }
  std::string state_mismatch(const NamedTensors& saved) const override {
    for (const auto& [name, t] : saved) {
      size_t b = 0;
      if (std::sscanf(name.c_str(), "bucket.%zu.", &b) != 1 || b >= buckets_.size() || !buckets_[b])
        return "'" + name + "' belongs to no PowerSGD bucket of this model (other buckets: another model or bucket_cap_mb?)";
    }
    for (size_t b = 0; b < buckets_.size(); ++b) {
      if (!buckets_[b]) continue;
      const std::string why = buckets_[b]->mismatch(of_bucket(saved, b));
      if (!why.empty()) return "bucket " + std::to_string(b) + ": " + why;
    }
    return "";
  }
  void load_state(const NamedTensors& saved) override {
    for (size_t b = 0; b < buckets_.size(); ++b)
      if (buckets_[b]) buckets_[b]->load(of_bucket(saved, b));
  }

 private:
  int rank_;
  int64_t start_step_;
  std::vector<std::unique_ptr<PowerSgdBucket>> buckets_;  // by bucket index; null: not compressed
  bool active_ = false;  // this backward compresses (start_step_ synced backwards are done)
};

}  // namespace

std::unique_ptr<CommHook> make_comm_hook_powersgd(const ReducerOptions& options) {
  if (options.powersgd_rank < 1)
    throw UsageError("powersgd_rank must be at least 1 (got " + std::to_string(options.powersgd_rank) +
                     "); set ddp.powersgd_rank in the config, e.g. 1 to 4");
  if (options.powersgd_start_step < 0)
    throw UsageError("powersgd_start_step must be >= 0 (got " + std::to_string(options.powersgd_start_step) +
                     "); set ddp.powersgd_start_step in the config");
  return std::make_unique<PowerSgdHook>(options.powersgd_rank, options.powersgd_start_step);
}

}  // namespace xlaunch
