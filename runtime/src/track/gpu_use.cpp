#include "track/gpu_use.h"

#include <exception>
#include <vector>

#include "xlaunch/status/step_stats.h"

namespace xlaunch::track {

GpuUse::GpuUse(const std::string& bus_id, const std::string& nvml_library) {
  try {
    find_gpu(bus_id, nvml_library);
  } catch (const std::exception& e) {  // an allocation: no GPU use rather than a failed job
    device_ = nullptr;
    why_ = std::string("reading the GPU's use failed: ") + e.what();
  }
}

void GpuUse::find_gpu(const std::string& bus_id, const std::string& nvml_library) {
  if (bus_id.empty()) {
    why_ = "this rank trains on the CPU: no GPU use to log";
    return;
  }
  bus_id_ = status::normalize_pci_bus_id(bus_id);
  if (bus_id_.empty()) {
    why_ = "this rank's GPU has no PCI bus id NVML could match ('" + bus_id + "')";
    return;
  }
  nvml_ = status::Nvml::open(nvml_library, &why_);
  if (!nvml_) return;
  unsigned n = 0;
  if (const int rc = nvml_->device_count(&n); rc != status::Nvml::kSuccess) {
    why_ = "NVML (" + nvml_->library() + ") could not count the GPUs: " + nvml_->error_string(rc);
    return;
  }
  for (unsigned i = 0; i < n && !device_; ++i) {
    status::Nvml::Device d = nullptr;
    std::string id;
    if (nvml_->device_by_index(i, &d) == status::Nvml::kSuccess &&
        nvml_->pci_bus_id(d, &id) == status::Nvml::kSuccess && id == bus_id_)
      device_ = d;
  }
  if (!device_) {
    why_ = "NVML (" + nvml_->library() + ") lists no GPU at PCI bus id " + bus_id_ + " (this rank's GPU)";
    return;
  }
  // A GPU split into MIG slices: the rank has one slice, and NVML measures none of them alone.
  bool mig = false;
  if (nvml_->mig_enabled(device_, &mig) == status::Nvml::kSuccess && mig) {
    device_ = nullptr;
    why_ = "the GPU at " + bus_id_ + " is split into MIG slices: NVML gives no SM use per slice";
    return;
  }
  std::vector<status::Nvml::Sample> s;
  if (nvml_->sm_utilization_samples(device_, 0, &s) == status::Nvml::kSuccess) last_seen_us_ = s.back().timestamp_us;
  why_.clear();
}

std::optional<double> GpuUse::sm_pct() {
  try {
    const std::optional<double> v = read();
    if (v) why_.clear();
    return v;
  } catch (const std::exception& e) {
    why_ = std::string("reading the GPU's use failed: ") + e.what();
    return std::nullopt;
  }
}

std::optional<double> GpuUse::read() {
  if (!device_) return std::nullopt;  // why_ says why since the constructor
  std::vector<status::Nvml::Sample> s;
  if (nvml_->sm_utilization_samples(device_, last_seen_us_, &s) == status::Nvml::kSuccess) {
    double sum = 0;
    for (const auto& x : s) sum += x.value;
    last_seen_us_ = s.back().timestamp_us;
    return sum / static_cast<double>(s.size());
  }
  // No sample since the last call (a call soon after the previous), or an NVML without samples.
  unsigned pct = 0;
  if (const int rc = nvml_->sm_utilization(device_, &pct); rc != status::Nvml::kSuccess) {
    why_ = "NVML refused the utilization of the GPU at " + bus_id_ + ": " + nvml_->error_string(rc);
    return std::nullopt;
  }
  return pct;
}

std::string GpuUse::why_nothing() {
  if (why_.empty() || !said_.insert(why_).second) return "";
  return why_;
}

}  // namespace xlaunch::track
