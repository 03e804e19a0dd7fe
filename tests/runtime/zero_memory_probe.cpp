// Memory of one rank at a ZeRO stage, measured: trains the benchmark MLP (784-H-H-10, bench_model.h)
// with AdamW for a few steps and prints, on each rank, one line
//   zero_memory rank=R world=W stage=S bucket_comm=C hidden=H params=N state_bytes=B vm_hwm_kb=K
//               max_anon_kb=A max_shmem_kb=M max_file_kb=F <phase>_kb=RSS:ANON:SHMEM ...
// vm_hwm_kb is the kernel's peak resident set of this process (VmHWM, read at the end). It counts
// every page mapped into this process, shared ones included: over shared memory a rank touches
// parts of the other ranks' buffers, which then count in each rank's VmHWM although they exist
// once. max_anon_kb / max_shmem_kb / max_file_kb are the largest RssAnon / RssShmem / RssFile seen
// at the phase boundaries (after construction, prepare, each backward and each step), which say
// where the peak went. For zero_memory_test.sh, which runs one job per stage (a peak is per process
// lifetime) and compares them.
// Usage: zero_memory_probe --stage S [--cpu_allreduce auto|mpi] [--hidden H] [--steps N] [--batch B]
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench_model.h"
#include "xlaunch/accelerator.h"

namespace {

// /proc/self/status's memory lines, in kB.
std::map<std::string, int64_t> status_kb() {
  std::map<std::string, int64_t> out;
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos || line.find(" kB") == std::string::npos) continue;
    out[line.substr(0, colon)] = std::stoll(line.substr(colon + 1));
  }
  return out;
}

struct Phases {
  std::ostringstream line;
  int64_t max_anon = 0, max_shmem = 0, max_file = 0;
  void mark(const std::string& name) {
    const auto s = status_kb();
    max_anon = std::max(max_anon, s.at("RssAnon"));
    max_shmem = std::max(max_shmem, s.at("RssShmem"));
    max_file = std::max(max_file, s.at("RssFile"));
    line << ' ' << name << "_kb=" << s.at("VmRSS") << ':' << s.at("RssAnon") << ':' << s.at("RssShmem");
  }
};

}  // namespace

int main(int argc, char** argv) {
  int stage = -1;
  std::string transport = "auto";
  int64_t hidden = 4096, steps = 3, batch = 32;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--stage") stage = std::stoi(v);
    else if (k == "--cpu_allreduce") transport = v;
    else if (k == "--hidden") hidden = std::stoll(v);
    else if (k == "--steps") steps = std::stoll(v);
    else if (k == "--batch") batch = std::stoll(v);
    else stage = -1, i = argc;
  }
  if (stage < 0 || argc % 2 == 0)
    return std::fprintf(stderr, "usage: zero_memory_probe --stage S [--cpu_allreduce auto|mpi] [--hidden H] "
                                "[--steps N] [--batch B]\n"), 2;
  Phases phases;
  phases.mark("main");
  xlaunch::AcceleratorOptions o;
  o.cpu = true;
  o.num_threads = 1;
  o.cpu_allreduce = transport;
  o.ddp.zero_stage = stage;
  // LibTorch's AdamW step at every stage, as docs/memory.md's figures were measured: it makes a
  // denominator tensor per parameter (the largest weight's 64 MB at stage 0), which the fused step
  // (optimizer.fused) does not, so the fused step lowers every stage's peak by as much, and stage 0's
  // most; the sharding compared here is the same either way.
  o.optimizer_fused = "false";
  xlaunch::Accelerator acc(o);
  phases.mark("start");
  torch::manual_seed(1);
  xlaunch::bench::Mlp mlp(hidden);
  phases.mark("model");
  auto model = acc.prepare(mlp);
  torch::optim::AdamW adamw(mlp->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  auto& opt = acc.prepare(adamw);
  phases.mark("prepared");
  auto gen = at::detail::createCPUGenerator(100 + acc.process_index());
  for (int64_t step = 0; step < steps; ++step) {
    const at::Tensor x = at::randn({batch, 784}, gen);
    const at::Tensor y = at::randint(0, 10, {batch}, gen, at::kLong);
    acc.backward(torch::nn::functional::cross_entropy(model(x), y));
    phases.mark("backward" + std::to_string(step));
    opt.step();
    opt.zero_grad();
    phases.mark("step" + std::to_string(step));
  }
  int64_t params = 0;
  for (const auto& p : mlp->parameters()) params += p.numel();
  const auto end = status_kb();
  std::printf("zero_memory rank=%d world=%d stage=%d bucket_comm=%s hidden=%lld params=%lld state_bytes=%lld "
              "vm_hwm_kb=%lld max_anon_kb=%lld max_shmem_kb=%lld max_file_kb=%lld%s\n",
              acc.process_index(), acc.num_processes(), stage, acc.bucket_communicator(acc.device())->name().c_str(),
              static_cast<long long>(hidden), static_cast<long long>(params), static_cast<long long>(opt.state_bytes()),
              static_cast<long long>(end.at("VmHWM")), static_cast<long long>(phases.max_anon),
              static_cast<long long>(phases.max_shmem), static_cast<long long>(phases.max_file),
              phases.line.str().c_str());
  std::fflush(stdout);
  return 0;
}
