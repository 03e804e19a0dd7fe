// Torch state in checkpoint files: tensor dictionaries in torch's pickle format (torch.load reads
// them), a module's parameters and buffers by name, and the random generators' states.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace xlaunch {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// A dictionary of CPU copies, pickled.
std::string pickle_bytes(const NamedTensors& tensors);
// files[path] unpickled; throws UsageError when it is missing or not a tensor dictionary.
NamedTensors unpickle(const std::map<std::string, std::string>& files, const std::string& path);

// Parameters, then defined buffers, by their qualified names (the tensors themselves).
NamedTensors model_state(const torch::nn::Module& m);
// "[3, 4] Float": what a tensor is, for messages and metadata.
std::string describe(const at::Tensor& t);
// Refuses a checkpoint of another model: throws UsageError naming the first entry that differs,
// with both descriptions. id: the model's index, for the message.
void check_same_model(size_t id, const NamedTensors& mine, const NamedTensors& saved);

// The CPU generator's state, and the CUDA one's on a GPU, pickled.
std::string rng_bytes(const at::Device& device);
void restore_rng(const NamedTensors& states, const at::Device& device);

}  // namespace xlaunch
