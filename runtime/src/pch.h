// Precompiled for the runtime's translation units: the torch headers every one of them needs.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <mpi.h>
