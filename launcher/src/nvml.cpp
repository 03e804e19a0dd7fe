#include "nvml.h"

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>

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
  std::vector<nvmlDevice_t> devices;

  ~Api() {
    if (shutdown) shutdown();
    if (lib) dlclose(lib);
  }
};

GpuSampler::GpuSampler(double interval_s) : api_(std::make_unique<Api>()) {
  const char* custom = std::getenv("XLAUNCH_NVML_LIBRARY");
  const std::string name = custom && *custom ? custom : "libnvidia-ml.so.1";
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
  for (unsigned int i = 0; i < n; ++i) {
    nvmlDevice_t d = nullptr;
    if (a.handle(i, &d) == 0) a.devices.push_back(d);
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
    std::vector<GpuSample> now;
    for (nvmlDevice_t d : api_->devices) {
      GpuSample s;
      nvmlUtilization_t u{};
      nvmlMemory_t m{};
      unsigned int mw = 0;
      if (api_->util(d, &u) == 0) s.sm_pct = u.gpu;
      if (api_->memory(d, &m) == 0) {
        s.mem_used_gib = static_cast<double>(m.used) / (1ull << 30);
        s.mem_total_gib = static_cast<double>(m.total) / (1ull << 30);
      }
      if (api_->power && api_->power(d, &mw) == 0) s.power_w = mw / 1000.0;
      now.push_back(s);
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      samples_.emplace_back(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(),
                            std::move(now));
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
  }
}

std::vector<GpuSample> GpuSampler::latest() const {
  std::lock_guard<std::mutex> lk(mu_);
  return samples_.empty() ? std::vector<GpuSample>{} : samples_.back().second;
}

std::vector<GpuUse> GpuSampler::mean() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<GpuUse> out(samples_.empty() ? 0 : static_cast<size_t>(gpus_));
  for (const auto& [t, per_gpu] : samples_)
    for (size_t g = 0; g < per_gpu.size() && g < out.size(); ++g) {
      out[g].sm_pct += per_gpu[g].sm_pct / samples_.size();
      out[g].mem_used_gib += per_gpu[g].mem_used_gib / samples_.size();
      out[g].mem_total_gib = per_gpu[g].mem_total_gib;
      out[g].power_w += per_gpu[g].power_w / samples_.size();
    }
  return out;
}

std::vector<std::pair<double, std::vector<GpuSample>>> GpuSampler::history() const {
  std::lock_guard<std::mutex> lk(mu_);
  return samples_;
}

}  // namespace xlaunch::launcher
