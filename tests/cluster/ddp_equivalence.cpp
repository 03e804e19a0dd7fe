// Data-parallel training on any number of ranks (and machines) compared with one process doing the
// same work: every rank also trains the one-process reference on all ranks' batches concatenated
// (it can build each rank's batch from (rank, step)), and compares. Prints, on each rank,
//   ddp_equivalence rank=R world=W bucket_comm=C hook=H grad_rel_err=E param_rel_err=E replicas_equal=0|1 PASS|FAIL
// and exits 1 on FAIL. For multimachine_test.sh (tests/runtime/ddp_mpi_test is written for 2 ranks).
// With --comm_hook fp16/bf16 the gradients must match within 16-bit rounding (2e-3 / 2e-2);
// powersgd (rank 2, from step 2) approximates them, so only the replicas must stay bitwise equal.
// Usage: ddp_equivalence [--cpu_allreduce auto|mpi] [--comm_hook none|fp16|bf16|powersgd]
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
  options.ddp.powersgd_rank = 2;
  options.ddp.powersgd_start_step = 2;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 < argc && k == "--cpu_allreduce") options.cpu_allreduce = argv[i + 1];
    else if (i + 1 < argc && k == "--comm_hook") options.ddp.comm_hook = argv[i + 1];
    else return std::fprintf(stderr, "usage: ddp_equivalence [--cpu_allreduce auto|mpi] [--comm_hook H]\n"), 2;
  }
  const std::string& hook = options.ddp.comm_hook;
  const double tol = hook == "bf16" ? 2e-2 : hook == "fp16" ? 2e-3 : 1e-5;
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
  bool replicas_equal = true;  // every rank holds bitwise rank 0's parameters
  for (const auto& p : mlp->parameters()) {
    const at::Tensor all = acc.gather(p.detach().unsqueeze(0));
    for (int r = 1; r < world; ++r) replicas_equal = replicas_equal && all[r].equal(all[0]);
  }
  const bool ok = replicas_equal && (hook == "powersgd" || (grad_err < tol && param_err < tol));
  std::printf("ddp_equivalence rank=%d world=%d bucket_comm=%s hook=%s grad_rel_err=%.2g param_rel_err=%.2g "
              "replicas_equal=%d %s\n",
              acc.process_index(), world, acc.bucket_communicator(acc.device())->name().c_str(), hook.c_str(), grad_err,
              param_err, replicas_equal ? 1 : 0, ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
