// Data-parallel training on any number of ranks (and machines) compared with one process doing the
// same work: every rank also trains the one-process reference on all ranks' batches concatenated
// (it can build each rank's batch from (rank, step)), and compares. Prints, on each rank,
//   ddp_equivalence rank=R world=W bucket_comm=C grad_rel_err=E param_rel_err=E PASS|FAIL
// and exits 1 on FAIL. For multimachine_test.sh (tests/runtime/ddp_mpi_test is written for 2 ranks).
// Usage: ddp_equivalence [--cpu_allreduce auto|mpi]
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "../runtime/models.h"
#include "xlaunch/accelerator.h"

using namespace xlaunch::test;

namespace {

double max_rel_err(torch::nn::Module& got, torch::nn::Module& want, bool grads) {
  auto ref = want.named_parameters();
  double worst = 0;
  for (const auto& item : got.named_parameters())
    worst = std::max(worst, grads ? rel_err(item.value().grad(), ref[item.key()].grad())
                                  : rel_err(item.value(), ref[item.key()]));
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  xlaunch::AcceleratorOptions options;
  options.cpu = true;
  options.num_threads = 1;
  if (argc == 3 && std::string(argv[1]) == "--cpu_allreduce") options.cpu_allreduce = argv[2];
  else if (argc != 1) return std::fprintf(stderr, "usage: ddp_equivalence [--cpu_allreduce auto|mpi]\n"), 2;
  xlaunch::Accelerator acc(options);
  const int world = acc.num_processes();
  torch::manual_seed(3);
  Mlp mlp, reference;
  copy_state(*reference, *mlp);
  auto model = acc.prepare(mlp);
  torch::optim::SGD sgd(mlp->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::SGD ref_sgd(reference->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto& opt = acc.prepare(sgd);
  double grad_err = 0;
  for (int step = 0; step < 8; ++step) {
    const auto mine = mlp_batch(acc.process_index(), step);
    acc.backward(loss_of(model(mine.x), mine.y));
    std::vector<Batch> parts;
    for (int r = 0; r < world; ++r) parts.push_back(mlp_batch(r, step));
    const auto all = concat(parts);
    loss_of(reference(all.x), all.y).backward();
    grad_err = std::max(grad_err, max_rel_err(*mlp, *reference, true));
    opt.step();
    opt.zero_grad();
    ref_sgd.step();
    ref_sgd.zero_grad();
  }
  const double param_err = max_rel_err(*mlp, *reference, false);
  const bool ok = grad_err < 1e-5 && param_err < 1e-5;
  std::printf("ddp_equivalence rank=%d world=%d bucket_comm=%s grad_rel_err=%.2g param_rel_err=%.2g %s\n",
              acc.process_index(), world, acc.bucket_communicator(acc.device())->name().c_str(), grad_err, param_err,
              ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
