#include "overrides.h"

namespace xlaunch::launcher {

using config::DistributedType;
using config::LaunchConfig;
using config::MixedPrecision;

void add_override_options(CLI::App* app, Overrides& o) {
  app->add_option("-n,--num_processes", o.num_processes, "Processes in total, over all machines");
  app->add_option("--num_machines", o.num_machines, "Machines the job runs on");
  app->add_option("--machine_rank", o.machine_rank, "Rank of this machine, 0 to num_machines - 1");
  app->add_option("--main_process_ip", o.main_process_ip, "Address of the machine of rank 0");
  app->add_option("--main_process_port", o.main_process_port, "Port on the main machine; 0 picks a free one");
  app->add_option("--mixed_precision", o.mixed_precision, "no, fp16 or bf16")
      ->check(CLI::IsMember({"no", "fp16", "bf16"}));
  app->add_option("--gradient_accumulation_steps", o.gradient_accumulation_steps,
                  "Micro-steps per optimizer step");
  app->add_option("--hostfile", o.hostfile, "Open MPI hostfile listing the machines");
  app->add_option("--log_dir", o.log_dir, "Directory for per-rank logs");
  app->add_flag("--cpu", o.cpu, "Train on CPUs even where GPUs exist");
}

std::vector<std::string> apply_overrides(LaunchConfig& c, const Overrides& o, int gpu_count) {
  std::vector<std::string> set;
  auto take = [&](const auto& opt, auto& field, const char* key) {
    if (!opt) return;
    field = *opt;
    set.push_back(key);
  };
  take(o.num_processes, c.num_processes, "num_processes");
  take(o.num_machines, c.num_machines, "num_machines");
  take(o.machine_rank, c.machine_rank, "machine_rank");
  take(o.main_process_ip, c.main_process_ip, "main_process_ip");
  take(o.main_process_port, c.main_process_port, "main_process_port");
  take(o.gradient_accumulation_steps, c.gradient_accumulation_steps, "gradient_accumulation_steps");
  take(o.hostfile, c.mpi.hostfile, "mpi.hostfile");
  take(o.log_dir, c.log_dir, "log_dir");
  if (o.mixed_precision) {
    const std::string& m = *o.mixed_precision;
    c.mixed_precision = m == "fp16" ? MixedPrecision::Fp16 : m == "bf16" ? MixedPrecision::Bf16 : MixedPrecision::No;
    set.push_back("mixed_precision");
  }
  if (o.cpu) {
    c.use_cpu = true;
    set.push_back("use_cpu");
    if (c.distributed_type == DistributedType::MultiGpu) {
      c.distributed_type = DistributedType::MultiCpu;
      set.push_back("distributed_type");
    }
  }
  if ((c.num_processes > 1 || c.num_machines > 1) && c.distributed_type == DistributedType::No) {
    c.distributed_type = c.use_cpu || gpu_count == 0 ? DistributedType::MultiCpu : DistributedType::MultiGpu;
    set.push_back("distributed_type");
  }
  return set;
}

LaunchConfig machine_defaults(int gpu_count, int cpu_cores) {
  LaunchConfig c;
  if (gpu_count > 0) {
    c.distributed_type = gpu_count > 1 ? DistributedType::MultiGpu : DistributedType::No;
    c.num_processes = gpu_count;
  } else {
    c.distributed_type = cpu_cores > 1 ? DistributedType::MultiCpu : DistributedType::No;
    c.num_processes = cpu_cores > 1 ? cpu_cores : 1;
    c.use_cpu = cpu_cores > 1;
  }
  return c;
}

}  // namespace xlaunch::launcher
