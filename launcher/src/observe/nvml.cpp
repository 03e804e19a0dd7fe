#include "observe/nvml.h"

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "xlaunch/env_vars.h"

namespace xlaunch::launcher {
namespace {

// The few NVML entry points used, with their C types (nvml.h is not needed to build).
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlPciInfo_t {  // as nvmlDeviceGetPciInfo_v3 fills it
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];  // "00000000:BB:DD.F"
};

}  // namespace

struct GpuSampler::Api {
  void* lib = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*count)(unsigned int*) = nullptr;
  nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*util)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*pci)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
  std::vector<nvmlDevice_t> devices;
  std::vector<std::string> bus_ids;  // per device, normalized; empty when NVML did not say

  ~Api() {
    if (shutdown) shutdown();
    if (lib) dlclose(lib);
  }
};

GpuSampler::GpuSampler(double interval_s) : api_(std::make_unique<Api>()) {
  std::string name = env::get_string(env::kNvmlLibrary);
  if (name.empty()) name = env::kNvmlLibrary.default_value;
  Api& a = *api_;
  a.lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!a.lib) {
    why_ = "NVML (" + name + ") not found: no NVIDIA driver on this machine";
    return;
  }
  const auto sym = [&](const char* n) { return dlsym(a.lib, n); };
  a.init = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlInit_v2"));
  a.count = reinterpret_cast<nvmlReturn_t (*)(unsigned int*)>(sym("nvmlDeviceGetCount_v2"));
  a.handle = reinterpret_cast<nvmlReturn_t (*)(unsigned int, nvmlDevice_t*)>(sym("nvmlDeviceGetHandleByIndex_v2"));
  a.util = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*)>(sym("nvmlDeviceGetUtilizationRates"));
  a.memory = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>(sym("nvmlDeviceGetMemoryInfo"));
  a.power = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned int*)>(sym("nvmlDeviceGetPowerUsage"));
  a.pci = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*)>(sym("nvmlDeviceGetPciInfo_v3"));
  auto* shutdown = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlShutdown"));
  unsigned int n = 0;
  if (!a.init || !a.count || !a.handle || !a.util || !a.memory || a.init() != 0) {
    why_ = "NVML (" + name + ") did not initialize";
    return;
  }
  a.shutdown = shutdown;
  if (a.count(&n) != 0 || n == 0) {
    why_ = "NVML sees no GPU";
    return;
  }
  char host[sizeof(profile::RankStats::host)] = {};  // as long as the ranks publish theirs
  gethostname(host, sizeof host - 1);
  host_ = host;
  for (unsigned int i = 0; i < n; ++i) {
    nvmlDevice_t d = nullptr;
    if (a.handle(i, &d) != 0) continue;
    a.devices.push_back(d);
    // The bus id names the GPU the way the ranks do (they publish theirs), whatever order CUDA
    // or CUDA_VISIBLE_DEVICES gives the GPUs. Without it the GPU is sampled but no rank's.
    nvmlPciInfo_t info{};
    const bool named = a.pci && a.pci(d, &info) == 0;
    a.bus_ids.push_back(named ? status::normalize_pci_bus_id(std::string(info.busId, strnlen(info.busId, sizeof info.busId)))
                              : std::string());
  }
  gpus_ = static_cast<int>(a.devices.size());
  if (gpus_ > 0) thread_ = std::thread([this, interval_s] { loop(interval_s); });
}

GpuSampler::~GpuSampler() { stop(); }

void GpuSampler::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

void GpuSampler::loop(double interval_s) {
  while (!stopping_) {
    sample();
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
  }
}

void GpuSampler::sample() {
  std::vector<GpuSample> now;
  std::lock_guard<std::mutex> lk(mu_);
  sums_.resize(api_->devices.size());
  sm_reads_.resize(sums_.size()), mem_reads_.resize(sums_.size()), power_reads_.resize(sums_.size());
  for (size_t g = 0; g < api_->devices.size(); ++g) {
    nvmlDevice_t d = api_->devices[g];
    GpuSample s;
    nvmlUtilization_t u{};
    nvmlMemory_t m{};
    unsigned int mw = 0;
    // A reading NVML refuses (utilization on a MIG slice, say) is left out, not counted as 0.
    if (api_->util(d, &u) == 0) {
      s.sm_pct = u.gpu;
      s.sm_ok = true;
      sums_[g].sm_pct += s.sm_pct, ++sm_reads_[g];
    }
    if (api_->memory(d, &m) == 0) {
      s.mem_used_gib = static_cast<double>(m.used) / (1ull << 30);
      s.mem_total_gib = static_cast<double>(m.total) / (1ull << 30);
      s.mem_ok = true;
      sums_[g].mem_used_gib += s.mem_used_gib, ++mem_reads_[g];
      sums_[g].mem_total_gib = s.mem_total_gib;
    }
    if (api_->power && api_->power(d, &mw) == 0) {
      s.power_w = mw / 1000.0;
      s.power_ok = true;
      sums_[g].power_w += s.power_w, ++power_reads_[g];
    }
    now.push_back(s);
  }
  const double t = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (samples_.size() < kHistory) samples_.emplace_back(t, std::move(now));
  else samples_[next_ % kHistory] = {t, std::move(now)};
  ++next_;
}

std::vector<GpuSample> GpuSampler::latest() const {
  std::lock_guard<std::mutex> lk(mu_);
  return next_ == 0 ? std::vector<GpuSample>{} : samples_[(next_ - 1) % kHistory].second;
}

std::vector<GpuUse> GpuSampler::mean() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<GpuUse> out;
  for (size_t g = 0; g < sums_.size() && next_ > 0; ++g) {
    if (sm_reads_[g] == 0 && mem_reads_[g] == 0) return {};  // NVML answers nothing useful: no columns
    GpuUse u;
    u.sm_pct = sm_reads_[g] ? sums_[g].sm_pct / sm_reads_[g] : -1;
    u.mem_used_gib = mem_reads_[g] ? sums_[g].mem_used_gib / mem_reads_[g] : 0;
    u.mem_total_gib = sums_[g].mem_total_gib;
    u.power_w = power_reads_[g] ? sums_[g].power_w / power_reads_[g] : 0;
    u.bus_id = api_->bus_ids[g];
    u.host = host_;
    out.push_back(u);
  }
  return out;
}

std::vector<GpuUse> GpuSampler::mean_since(double t0) const {
  const auto samples = history();
  std::vector<GpuUse> sum;
  std::vector<int> sm_n, mem_n, power_n;
  for (const auto& [t, per_gpu] : samples) {
    if (t < t0) continue;
    sum.resize(per_gpu.size()), sm_n.resize(per_gpu.size()), mem_n.resize(per_gpu.size()), power_n.resize(per_gpu.size());
    for (size_t g = 0; g < per_gpu.size(); ++g) {
      const GpuSample& s = per_gpu[g];
      if (s.sm_ok) sum[g].sm_pct += s.sm_pct, ++sm_n[g];
      if (s.mem_ok) sum[g].mem_used_gib += s.mem_used_gib, sum[g].mem_total_gib = s.mem_total_gib, ++mem_n[g];
      if (s.power_ok) sum[g].power_w += s.power_w, ++power_n[g];
    }
  }
  if (sum.empty()) return mean();
  for (size_t g = 0; g < sum.size(); ++g) {
    if (sm_n[g] == 0 && mem_n[g] == 0) return mean();
    sum[g].sm_pct = sm_n[g] ? sum[g].sm_pct / sm_n[g] : -1;
    sum[g].mem_used_gib = mem_n[g] ? sum[g].mem_used_gib / mem_n[g] : 0;
    sum[g].power_w = power_n[g] ? sum[g].power_w / power_n[g] : 0;
    sum[g].bus_id = api_->bus_ids[g];
    sum[g].host = host_;
  }
  return sum;
}

std::vector<std::pair<double, std::vector<GpuSample>>> GpuSampler::history() const {
  std::lock_guard<std::mutex> lk(mu_);
  if (samples_.size() < kHistory) return samples_;
  std::vector<std::pair<double, std::vector<GpuSample>>> out;
  for (size_t i = 0; i < kHistory; ++i) out.push_back(samples_[(next_ + i) % kHistory]);
  return out;
}

}  // namespace xlaunch::launcher
