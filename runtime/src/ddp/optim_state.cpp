#include "ddp/optim_state.h"

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <sstream>

namespace xlaunch {

StateEntries state_entries(const torch::optim::OptimizerParamState& state) {
  // The archive is the only generic view of a state: write it, read it back, list its keys.
  torch::serialize::OutputArchive out;
  state.serialize(out);
  std::stringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  return entries_of(in);
}

StateEntries entries_of(torch::serialize::InputArchive& archive) {
  StateEntries entries;
  for (const std::string& key : archive.keys()) {
    c10::IValue value;
    archive.read(key, value);
    entries.emplace_back(key, std::move(value));
  }
  return entries;
}

int64_t state_bytes(const torch::optim::Optimizer& optimizer) {
  int64_t total = 0;
  for (const auto& [impl, state] : optimizer.state())
    for (const auto& [key, value] : state_entries(*state))
      if (value.isTensor()) total += static_cast<int64_t>(value.toTensor().nbytes());
  return total;
}

}  // namespace xlaunch
