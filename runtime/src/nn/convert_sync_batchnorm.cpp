// convert_sync_batchnorm and what acc.prepare does with SyncBatchNorm (xlaunch/sync_batchnorm.h).
//
// A BatchNorm is replaced in every place the module tree holds it: its parent's registered
// children, and the entries of a Sequential, ModuleList or ModuleDict parent (their forward and
// iteration go through those entries, not the registry). Whether anything else holds it is read
// from its shared_ptr's use count: after counting the places above, any reference left is a
// member of the parent (or the user's own variable) that its forward would keep calling.
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>

#include <iostream>
#include <string>
#include <vector>

#include "nn/prepare_sync_batchnorm.h"
#include "xlaunch/error.h"
#include "xlaunch/sync_batchnorm.h"

namespace xlaunch {

namespace {

// One BatchNorm found in the tree: its parent, its name there and its dotted path from the root.
struct Site {
  torch::nn::Module* parent;
  std::string name, path, type;
  std::shared_ptr<torch::nn::Module> bn;
};

template <typename Impl>
bool as_batchnorm(const std::shared_ptr<torch::nn::Module>& m, torch::nn::BatchNormOptions* options,
                  SyncBatchNormImpl::Tensors* tensors) {
  auto bn = std::dynamic_pointer_cast<Impl>(m);
  if (!bn) return false;
  *options = bn->options;
  *tensors = {bn->weight, bn->bias, bn->running_mean, bn->running_var, bn->num_batches_tracked};
  return true;
}

bool read_batchnorm(const std::shared_ptr<torch::nn::Module>& m, torch::nn::BatchNormOptions* options,
                    SyncBatchNormImpl::Tensors* tensors) {
  return as_batchnorm<torch::nn::BatchNorm1dImpl>(m, options, tensors) ||
         as_batchnorm<torch::nn::BatchNorm2dImpl>(m, options, tensors) ||
         as_batchnorm<torch::nn::BatchNorm3dImpl>(m, options, tensors);
}

void find_batchnorms(torch::nn::Module& module, const std::string& prefix, std::vector<Site>& out) {
  torch::nn::BatchNormOptions options(1);
  SyncBatchNormImpl::Tensors tensors;
  for (const auto& item : module.named_children()) {
    const std::string path = prefix.empty() ? item.key() : prefix + "." + item.key();
    if (read_batchnorm(item.value(), &options, &tensors))
      out.push_back({&module, item.key(), path, item.value()->name(), item.value()});
    else
      find_batchnorms(*item.value(), path, out);
  }
}

// References to a BatchNorm the tree accounts for: the Site's own, the parent's children registry,
// and the parent container's entry.
long expected_references(torch::nn::Module& parent) {
  const bool container = dynamic_cast<torch::nn::SequentialImpl*>(&parent) ||
                         dynamic_cast<torch::nn::ModuleListImpl*>(&parent) ||
                         dynamic_cast<torch::nn::ModuleDictImpl*>(&parent);
  return 2 + (container ? 1 : 0);
}

void replace(const Site& site) {
  torch::nn::BatchNormOptions options(1);
  SyncBatchNormImpl::Tensors tensors;
  read_batchnorm(site.bn, &options, &tensors);
  auto sync = std::make_shared<SyncBatchNormImpl>(options, tensors);
  if (!site.bn->is_training()) sync->eval();
  site.parent->replace_module(site.name, sync);
  if (auto* seq = dynamic_cast<torch::nn::SequentialImpl*>(site.parent)) {
    for (auto& entry : *seq)
      if (entry.ptr() == site.bn) entry = sync;
  } else if (auto* list = dynamic_cast<torch::nn::ModuleListImpl*>(site.parent)) {
    for (auto& entry : *list)
      if (entry == site.bn) entry = sync;
  } else if (auto* dict = dynamic_cast<torch::nn::ModuleDictImpl*>(site.parent)) {
    for (auto& entry : *dict)
      if (entry.value() == site.bn) entry.value() = sync;
  }
}

// Every SyncBatchNorm of the tree, `module` included.
std::vector<SyncBatchNormImpl*> sync_layers(torch::nn::Module& module) {
  std::vector<SyncBatchNormImpl*> out;
  if (auto* self = dynamic_cast<SyncBatchNormImpl*>(&module)) out.push_back(self);
  for (const auto& m : module.modules(/*include_self=*/false))
    if (auto* layer = dynamic_cast<SyncBatchNormImpl*>(m.get())) out.push_back(layer);
  return out;
}

}  // namespace

int convert_sync_batchnorm(torch::nn::Module& module) {
  std::vector<Site> sites;
  find_batchnorms(module, "", sites);
  for (const Site& s : sites) {
    if (s.bn.use_count() <= expected_references(*s.parent)) continue;
    throw UsageError("sync_batchnorm: cannot convert `" + s.path + "` (" + s.type + ") to xlaunch::SyncBatchNorm: "
                     "something besides the module tree holds it, most likely a member of its parent that "
                     "its forward calls (`" + s.name + "(x)`), which no function outside that module can "
                     "reseat in C++. Declare that member as xlaunch::SyncBatchNorm (the same options; "
                     "xlaunch/sync_batchnorm.h) and acc.prepare synchronises it with or without this option; "
                     "or build the layers in a torch::nn::Sequential.");
  }
  for (const Site& s : sites) replace(s);
  return static_cast<int>(sites.size());
}

int set_sync_batchnorm_communicator(torch::nn::Module& module, const std::shared_ptr<Communicator>& comm) {
  const auto layers = sync_layers(module);
  for (SyncBatchNormImpl* layer : layers) layer->set_communicator(comm);
  return static_cast<int>(layers.size());
}

void prepare_sync_batchnorm(torch::nn::Module& model, bool convert, int rank,
                            const std::function<std::shared_ptr<Communicator>()>& comm) {
  if (convert) convert_sync_batchnorm(model);
  if (!sync_layers(model).empty()) {
    set_sync_batchnorm_communicator(model, comm());
  } else if (convert && rank == 0) {
    std::cerr << "[xlaunch] warning: sync_batchnorm is on (XLAUNCH_SYNC_BATCHNORM=1), but the prepared model has no "
                 "BatchNorm1d/2d/3d layer, so nothing is synchronised. Turn sync_batchnorm off for this model, or "
                 "prepare the model that holds the BatchNorm layers."
              << std::endl;
  }
}

}  // namespace xlaunch
