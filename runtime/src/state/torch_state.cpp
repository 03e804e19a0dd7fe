#include "state/torch_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/cuda.h>

#include <algorithm>
#include <mutex>
#include <sstream>

#include "xlaunch/error.h"

namespace xlaunch {

std::string pickle_bytes(const NamedTensors& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, t] : tensors) dict.insert(name, t.detach().to(at::kCPU).clone());
  const std::vector<char> v = torch::jit::pickle_save(dict);
  return std::string(v.begin(), v.end());
}

NamedTensors unpickle(const std::map<std::string, std::string>& files, const std::string& path) {
  const auto it = files.find(path);
  if (it == files.end()) throw UsageError("load_state: the checkpoint has no " + path);
  NamedTensors out;
  try {
    const c10::IValue v = torch::jit::pickle_load(std::vector<char>(it->second.begin(), it->second.end()));
    for (const auto& e : v.toGenericDict()) out.emplace_back(e.key().toStringRef(), e.value().toTensor());
  } catch (const c10::Error& e) {
    throw UsageError("load_state: " + path + " in the checkpoint is not a tensor dictionary: " + e.what_without_backtrace());
  }
  return out;
}

NamedTensors model_state(const torch::nn::Module& m) {
  NamedTensors out;
  for (const auto& p : m.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : m.named_buffers())
    if (b.value().defined()) out.emplace_back(b.key(), b.value());
  return out;
}

std::string describe(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes() << " " << at::toString(t.scalar_type());
  return os.str();
}

// Refuses a checkpoint of another model: the first entry that differs, with both descriptions.
void check_same_model(size_t id, const NamedTensors& mine, const NamedTensors& saved) {
  std::map<std::string, at::Tensor> by_name(saved.begin(), saved.end());
  for (const auto& [name, t] : mine) {
    const auto it = by_name.find(name);
    std::string theirs = it == by_name.end() ? "no such entry" : describe(it->second);
    if (it != by_name.end() && theirs == describe(t)) continue;
    throw UsageError("load_state: the checkpoint was made for another model: model " + std::to_string(id) + " '" +
                     name + "' is " + describe(t) + " here, and " + theirs +
                     " in the checkpoint. Build the model the checkpoint was saved from (same "
                     "constructor arguments), or start without load_state");
  }
  if (saved.size() != mine.size())
    for (const auto& [name, t] : saved)
      if (std::none_of(mine.begin(), mine.end(), [&](const auto& e) { return e.first == name; }))
        throw UsageError("load_state: the checkpoint was made for another model: it holds model " + std::to_string(id) +
                         " '" + name + "' " + describe(t) + ", which this model does not have");
}

std::string rng_bytes(const at::Device& device) {
  NamedTensors states;
  {
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(cpu.mutex());
    states.emplace_back("cpu", cpu.get_state());
  }
  if (device.is_cuda() && torch::cuda::is_available()) {
    at::Generator gen = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    states.emplace_back("cuda", gen.get_state());
  }
  return pickle_bytes(states);
}

void restore_rng(const NamedTensors& states, const at::Device& device) {
  for (const auto& [name, t] : states) {
    if (name == "cuda" && !(device.is_cuda() && torch::cuda::is_available())) continue;
    at::Generator gen = name == "cpu" ? at::detail::getDefaultCPUGenerator() : at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(t);
  }
}

}  // namespace xlaunch
