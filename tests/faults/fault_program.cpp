// A small data-parallel training loop in which one rank misbehaves, for the fault matrix
// (fault_matrix_test.cpp) and scripts/bench/faults.sh.
//   fault_program --fault F --fault_rank R --fault_step S [--steps N] [--hidden H]
// F: none | exit3 | return1 | exit0_early | throw | segv | kill9 | hang | mismatch | desync
// Rank R, at the start of step S, prints "fault_program: rank R injects F at step S at <ns>"
// (CLOCK_REALTIME, so the test can time the job's end from it), then:
//   exit3        std::exit(3)               return1   returns 1 from main
//   exit0_early  returns 0 from main         throw     an uncaught std::runtime_error
//   segv         raise(SIGSEGV)             kill9     raise(SIGKILL)
//   hang         sleeps forever             mismatch  a broadcast of 10 int64 where the others
//                                                      reduce gradients (run it with debug on)
//   desync       at step S every rank calls acc.gather on 4 floats, but rank R calls acc.reduce:
//                the training loop took another path on one rank (the flight recorder names it)
// The other ranks keep training. Errors from the runtime are caught in main: message, exit 1.
#include <signal.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <unistd.h>

#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <string>

#include "xlaunch/accelerator.h"

namespace {

struct Args {
  std::string fault = "none";
  int fault_rank = 1;
  int fault_step = 20;
  int steps = 100000;
  int hidden = 256;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--fault") a.fault = v;
    else if (k == "--fault_rank") a.fault_rank = std::atoi(v.c_str());
    else if (k == "--fault_step") a.fault_step = std::atoi(v.c_str());
    else if (k == "--steps") a.steps = std::atoi(v.c_str());
    else if (k == "--hidden") a.hidden = std::atoi(v.c_str());
    else throw std::invalid_argument("fault_program: unknown option " + k);
  }
  return a;
}

long long realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// Returns the exit code main should return now, or -1 to keep training.
int inject(const Args& a, xlaunch::Accelerator& acc, int step) {
  std::fprintf(stderr, "fault_program: rank %d injects %s at step %d at %lld\n", acc.process_index(), a.fault.c_str(),
               step, realtime_ns());
  std::fflush(stderr);
  if (a.fault == "exit3") std::exit(3);
  if (a.fault == "return1") return 1;
  if (a.fault == "exit0_early") return 0;
  if (a.fault == "throw") throw std::runtime_error("fault_program: injected exception");
  if (a.fault == "segv") raise(SIGSEGV);
  if (a.fault == "kill9") raise(SIGKILL);
  if (a.fault == "hang")
    for (;;) pause();
  if (a.fault == "mismatch") {
    at::Tensor t = at::zeros({10}, at::kLong);
    acc.broadcast(t, 0);
    return -1;
  }
  throw std::invalid_argument("fault_program: unknown fault " + a.fault);
}

int train(const Args& a) {
  xlaunch::Accelerator acc;
  acc.set_seed(1);
  auto model = acc.prepare(torch::nn::Sequential(torch::nn::Linear(64, a.hidden), torch::nn::ReLU(),
                                                 torch::nn::Linear(a.hidden, 10)));
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.01));
  auto& opt = acc.prepare(sgd);
  const at::Tensor x = at::randn({32, 64});
  const at::Tensor y = at::randint(0, 10, {32});
  for (int step = 0; step < a.steps; ++step) {
    if (a.fault == "desync" && step == a.fault_step) {
      const at::Tensor t = at::ones({4});
      if (acc.process_index() == a.fault_rank) {
        std::fprintf(stderr, "fault_program: rank %d injects desync at step %d at %lld\n", acc.process_index(), step,
                     realtime_ns());
        std::fflush(stderr);
        acc.reduce(t);
      } else {
        acc.gather(t);
      }
    }
    if (acc.process_index() == a.fault_rank && step == a.fault_step && a.fault != "none" && a.fault != "desync") {
      const int rc = inject(a, acc, step);
      if (rc >= 0) return rc;
      continue;  // mismatch: this rank skips the step's gradient allreduce
    }
    acc.backward(torch::nn::functional::cross_entropy(model(x), y));
    opt.step();
    opt.zero_grad();
  }
  acc.print("fault_program: finished ", a.steps, " steps");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    return train(a);
  } catch (const xlaunch::Error& e) {
    std::fprintf(stderr, "fault_program: %s\n", e.what());
    return 1;
  }
}
