// What this machine has: CPU cores, memory, GPUs, and the CUDA/NCCL libraries, found at run time
// through dlopen so the launcher links none of them (and never torch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xlaunch::launcher {

// Physical cores among the CPUs this process may run on (Open MPI's default slots); falls back
// to the number of usable hardware threads when the topology is not readable.
int physical_cpu_cores();

// Hardware threads this process may run on.
int usable_cpus();

// Total memory in bytes; 0 when unknown.
uint64_t total_memory_bytes();

struct Gpu {
  std::string name;
  uint64_t memory_bytes = 0;
};

struct GpuReport {
  std::vector<Gpu> gpus;
  std::string source;  // "NVML", "nvidia-smi", or "none (no NVML, no nvidia-smi)"
  std::string driver;  // driver version from NVML/nvidia-smi; empty when unknown
};

// Pure: the GPUs of `all` that CUDA shows under this CUDA_VISIBLE_DEVICES value: the listed
// indices in order (up to the first invalid one), or as many as listed when they are UUIDs.
std::vector<Gpu> visible_gpus(const std::vector<Gpu>& all, const std::string& cuda_visible_devices);

// The NVIDIA GPUs here: NVML through dlopen, else nvidia-smi, else none; restricted to those
// CUDA_VISIBLE_DEVICES leaves visible, as the ranks will see them.
GpuReport detect_gpus();

// "13.0", or "not available" when the library cannot be loaded.
std::string cuda_runtime_version();
std::string cuda_driver_version();
std::string nccl_version();

// "23.4 GiB"
std::string format_bytes(uint64_t bytes);

}  // namespace xlaunch::launcher
