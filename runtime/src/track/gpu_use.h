// How busy this rank's GPU was, read by the rank itself for the tracker's `xlaunch/gpu_sm` (the
// utilization scalars logged every report_interval steps; docs/tracking.md). The GPU is found
// among NVML's (xlaunch/status/nvml_api.h) by the PCI bus id the rank published in its stats
// (profile::stats().bus_id()), as the launcher's report finds it, whatever CUDA_VISIBLE_DEVICES
// and CUDA's device order did.
//
// What NVML measures is the whole GPU: the percent of time a kernel of any process ran on it.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>

#include "xlaunch/status/nvml_api.h"

namespace xlaunch::track {

class GpuUse {
 public:
  // `bus_id`: this rank's GPU as it published it (any form status::normalize_pci_bus_id takes;
  // empty on a CPU rank). `nvml_library`: empty for XLAUNCH_NVML_LIBRARY or the driver's NVML.
  // Finds the GPU and takes the driver's latest sample as the start of the first interval.
  // Never throws: whatever fails makes sm_pct() answer nothing, and why_nothing() say why.
  explicit GpuUse(const std::string& bus_id, const std::string& nvml_library = "");

  // The GPU's mean SM utilization, in percent, since the previous call (the first: since the
  // constructor): the mean of the driver's samples taken since then (nvmlDeviceGetSamples; the
  // driver keeps its last few seconds of them), or, when there is none newer or this NVML keeps
  // none, the utilization over the driver's last sampling period (nvmlDeviceGetUtilizationRates).
  // Nothing on a CPU rank, without NVML, for a GPU NVML does not list, for a MIG slice (NVML gives
  // no utilization per slice), or when NVML refuses the reading. Never throws.
  std::optional<double> sm_pct();

  // Why the last sm_pct() gave nothing, the first time that reason comes up; "" otherwise (a
  // value, or a reason said before), so that a caller printing it says each reason once.
  std::string why_nothing();

 private:
  void find_gpu(const std::string& bus_id, const std::string& nvml_library);
  std::optional<double> read();

  std::unique_ptr<status::Nvml> nvml_;
  status::Nvml::Device device_ = nullptr;  // null: nothing to read (why_ says why)
  std::string bus_id_;                     // normalized, for messages
  unsigned long long last_seen_us_ = 0;    // the newest driver sample already counted
  std::string why_;                        // why the last sm_pct() gave nothing; "" when it gave a value
  std::set<std::string> said_;             // the reasons why_nothing() returned already
};

}  // namespace xlaunch::track
