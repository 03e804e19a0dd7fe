#include "observe/gpu_sampler.h"

#include <unistd.h>

#include <chrono>

#include "xlaunch/status/nvml_api.h"

namespace xlaunch::launcher {

struct GpuSampler::Api {
  std::unique_ptr<status::Nvml> nvml;
  std::vector<status::Nvml::Device> devices;
  std::vector<std::string> bus_ids;  // per device, normalized; empty when NVML did not say
};

GpuSampler::GpuSampler(double interval_s) : api_(std::make_unique<Api>()) {
  Api& a = *api_;
  a.nvml = status::Nvml::open("", &why_);  // XLAUNCH_NVML_LIBRARY, or the driver's
  if (!a.nvml) return;
  unsigned int n = 0;
  if (a.nvml->device_count(&n) != status::Nvml::kSuccess || n == 0) {
    why_ = "NVML sees no GPU";
    return;
  }
  char host[sizeof(profile::RankStats::host)] = {};  // as long as the ranks publish theirs
  gethostname(host, sizeof host - 1);
  host_ = host;
  for (unsigned int i = 0; i < n; ++i) {
    status::Nvml::Device d = nullptr;
    if (a.nvml->device_by_index(i, &d) != status::Nvml::kSuccess) continue;
    a.devices.push_back(d);
    // The bus id names the GPU the way the ranks do (they publish theirs), whatever order CUDA
    // or CUDA_VISIBLE_DEVICES gives the GPUs. Without it the GPU is sampled but no rank's.
    std::string bus_id;
    a.bus_ids.push_back(a.nvml->pci_bus_id(d, &bus_id) == status::Nvml::kSuccess ? bus_id : std::string());
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
  const status::Nvml& nvml = *api_->nvml;
  for (size_t g = 0; g < api_->devices.size(); ++g) {
    const status::Nvml::Device d = api_->devices[g];
    GpuSample s;
    unsigned sm = 0, mw = 0;
    status::Nvml::Memory m;
    // A reading NVML refuses (utilization on a MIG slice, say) is left out, not counted as 0.
    if (nvml.sm_utilization(d, &sm) == status::Nvml::kSuccess) {
      s.sm_pct = sm;
      s.sm_ok = true;
      sums_[g].sm_pct += s.sm_pct, ++sm_reads_[g];
    }
    if (nvml.memory(d, &m) == status::Nvml::kSuccess) {
      s.mem_used_gib = static_cast<double>(m.used) / (1ull << 30);
      s.mem_total_gib = static_cast<double>(m.total) / (1ull << 30);
      s.mem_ok = true;
      sums_[g].mem_used_gib += s.mem_used_gib, ++mem_reads_[g];
      sums_[g].mem_total_gib = s.mem_total_gib;
    }
    if (nvml.power_mw(d, &mw) == status::Nvml::kSuccess) {
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
