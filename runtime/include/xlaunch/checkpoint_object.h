// The user's own state in checkpoints (Accelerator::register_for_checkpointing in
// xlaunch/accelerator.h, which includes this): anything that saves itself to and loads itself from
// a torch::serialize archive.
#pragma once

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <string>
#include <utility>

namespace xlaunch {

class CheckpointObject {
 public:
  virtual ~CheckpointObject() = default;
  virtual void save(torch::serialize::OutputArchive& archive) const = 0;
  virtual void load(torch::serialize::InputArchive& archive) = 0;
  // The registered object's type, compared on load ("EMA" in one, "BestMetric" in the other: refused).
  virtual std::string type_name() const = 0;
};

namespace detail {
template <typename T>
class CheckpointRef final : public CheckpointObject {
 public:
  CheckpointRef(T* obj, std::string type) : obj_(obj), type_(std::move(type)) {}
  void save(torch::serialize::OutputArchive& a) const override { obj_->save(a); }
  void load(torch::serialize::InputArchive& a) override { obj_->load(a); }
  std::string type_name() const override { return type_; }

 private:
  T* obj_;
  std::string type_;
};
}  // namespace detail

}  // namespace xlaunch
