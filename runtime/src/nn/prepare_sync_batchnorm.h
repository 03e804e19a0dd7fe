// What acc.prepare(model) does for SyncBatchNorm (xlaunch/sync_batchnorm.h), before anything else
// reads the model: with `convert` (the sync_batchnorm option), converts its BatchNorm layers, and
// says once, on rank 0, when there is none; then hands every SyncBatchNorm the
// communicator `comm()` returns (called only when there is one, so a model without any makes no
// device communicator).
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>

#include "xlaunch/extend/communicator.h"

namespace xlaunch {

void prepare_sync_batchnorm(torch::nn::Module& model, bool convert, int rank,
                            const std::function<std::shared_ptr<Communicator>()>& comm);

}  // namespace xlaunch
