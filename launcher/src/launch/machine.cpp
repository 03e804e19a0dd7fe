#include "launch/machine.h"

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "launch/programs.h"
#include "xlaunch/status/nvml_api.h"

namespace xlaunch::launcher {

int usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

int physical_cpu_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return usable_cpus();
  std::set<std::pair<int, int>> cores;  // (package, core)
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    int package = -1, core = -1;
    std::ifstream(base + "physical_package_id") >> package;
    std::ifstream(base + "core_id") >> core;
    if (package < 0 || core < 0) return usable_cpus();
    cores.insert({package, core});
  }
  return cores.empty() ? usable_cpus() : static_cast<int>(cores.size());
}

uint64_t total_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

std::string format_bytes(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return buf;
}

namespace {

void* open_first(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (void* h = dlopen(n, RTLD_LAZY | RTLD_LOCAL)) return h;
  return nullptr;
}

bool gpus_from_nvml(GpuReport& r) {
  std::string why;
  const auto nvml = status::Nvml::open("", &why);  // XLAUNCH_NVML_LIBRARY, or the driver's
  if (!nvml) return false;
  unsigned n = 0;
  if (nvml->device_count(&n) != status::Nvml::kSuccess) n = 0;
  for (unsigned i = 0; i < n; ++i) {
    status::Nvml::Device dev = nullptr;
    if (nvml->device_by_index(i, &dev) != status::Nvml::kSuccess) continue;
    Gpu g;
    status::Nvml::Memory m;
    nvml->name(dev, &g.name);  // unnamed when NVML does not say
    if (nvml->memory(dev, &m) == status::Nvml::kSuccess) g.memory_bytes = m.total;
    r.gpus.push_back(g);
  }
  nvml->driver_version(&r.driver);  // empty when unknown
  r.source = "NVML";
  return true;
}

bool gpus_from_nvidia_smi(GpuReport& r) {
  const CommandOutput smi = run_command(
      "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits 2>/dev/null");
  if (smi.status != 0) return false;
  std::istringstream lines(smi.out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string name, mib, driver;
    std::getline(fields, name, ',');
    std::getline(fields, mib, ',');
    std::getline(fields, driver, ',');
    Gpu g;
    g.name = name;
    g.memory_bytes = std::strtoull(mib.c_str(), nullptr, 10) * 1024ull * 1024ull;
    r.gpus.push_back(g);
    r.driver = driver.substr(driver.find_first_not_of(' ') == std::string::npos ? 0 : driver.find_first_not_of(' '));
  }
  r.source = "nvidia-smi";
  return true;
}

std::string major_minor(int v) {  // CUDA encodes 13.0 as 13000
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string version_from(std::initializer_list<const char*> libs, const char* symbol,
                         std::string (*format)(int)) {
  void* h = open_first(libs);
  if (!h) return "not available";
  using Get = int (*)(int*);
  auto get = reinterpret_cast<Get>(dlsym(h, symbol));
  int v = 0;
  if (!get || get(&v) != 0) return "not available (" + std::string(symbol) + " failed)";
  return format(v);
}

}  // namespace

std::vector<Gpu> visible_gpus(const std::vector<Gpu>& all, const std::string& cuda_visible_devices) {
  std::vector<std::string> items;
  std::stringstream list(cuda_visible_devices);
  for (std::string item; std::getline(list, item, ',');) items.push_back(item);
  std::vector<Gpu> kept;
  for (const std::string& item : items) {
    char* end = nullptr;
    const long idx = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0') {  // named by UUID (GPU-..., MIG-...): as many as listed
      kept.assign(all.begin(), all.begin() + static_cast<long>(std::min(items.size(), all.size())));
      return kept;
    }
    if (idx < 0 || idx >= static_cast<long>(all.size())) break;  // CUDA ignores the rest after an invalid index
    kept.push_back(all[static_cast<size_t>(idx)]);
  }
  return kept;
}

GpuReport detect_gpus() {
  GpuReport r;
  if (gpus_from_nvml(r) || gpus_from_nvidia_smi(r)) {
    if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
      r.gpus = visible_gpus(r.gpus, v);
      r.source += std::string(", CUDA_VISIBLE_DEVICES='") + v + "'";
    }
    return r;
  }
  r.source = "none (no NVML, no nvidia-smi)";
  return r;
}

std::string cuda_runtime_version() {
  return version_from({"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"},
                      "cudaRuntimeGetVersion", major_minor);
}

std::string cuda_driver_version() {
  return version_from({"libcuda.so.1", "libcuda.so"}, "cuDriverGetVersion", major_minor);
}

std::string nccl_version() {
  return version_from({"libnccl.so.2", "libnccl.so"}, "ncclGetVersion", [](int v) {
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch; older ones major*1000 + minor*100 + patch.
    const int major = v >= 10000 ? v / 10000 : v / 1000;
    const int rest = v >= 10000 ? v % 10000 : v % 1000;
    return std::to_string(major) + "." + std::to_string(rest / 100) + "." + std::to_string(rest % 100);
  });
}

}  // namespace xlaunch::launcher
