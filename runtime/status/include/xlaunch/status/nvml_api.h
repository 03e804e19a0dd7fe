// NVML, the NVIDIA driver's management library, loaded at run time with dlopen (no link-time
// dependency, no nvml.h needed to build): the one place that opens it and looks up its symbols,
// shared by the launcher (its GPU sampler and `xlaunch env`) and the runtime (a rank's GPU use for
// the tracker). Only the few queries they make are here, each returning NVML's own status code
// (kSuccess, or the error NVML gave; kFunctionNotFound when this driver's NVML lacks the symbol),
// so that every caller checks every call and can name the failure with error_string().
//
// NVML is thread-safe, and nvmlInit/nvmlShutdown count their calls: several Nvml objects in one
// process (the launcher's sampler and its machine check) each hold their own initialization.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace xlaunch::status {

class Nvml {
 public:
  // NVML's status codes that callers tell apart (nvmlReturn_t).
  static constexpr int kSuccess = 0;
  static constexpr int kNotSupported = 3;       // NVML_ERROR_NOT_SUPPORTED (utilization on a MIG GPU)
  static constexpr int kNotFound = 6;           // NVML_ERROR_NOT_FOUND (no sample newer than asked)
  static constexpr int kFunctionNotFound = 13;  // NVML_ERROR_FUNCTION_NOT_FOUND

  using Device = void*;  // nvmlDevice_t

  struct Memory {  // nvmlMemory_t, in bytes
    unsigned long long total = 0, free = 0, used = 0;
  };
  struct Sample {  // one of the driver's samples (nvmlSample_t), its value whatever its NVML type
    unsigned long long timestamp_us = 0;  // the CPU's clock (CLOCK_REALTIME), microseconds
    double value = 0;
  };

  // Loads `library` (a name dlopen resolves, or a path; empty: XLAUNCH_NVML_LIBRARY, or
  // libnvidia-ml.so.1 where that is unset or empty) and initializes NVML. nullptr when it cannot,
  // with *why a sentence naming the library and the reason (no driver on this machine, an NVML
  // too old for nvmlInit_v2, nvmlInit's error). Never throws.
  static std::unique_ptr<Nvml> open(const std::string& library, std::string* why);
  ~Nvml();  // nvmlShutdown, dlclose
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  const std::string& library() const { return library_; }
  // "Not Supported" and the like: NVML's words for `code` (nvmlErrorString), with the number.
  std::string error_string(int code) const;

  // The GPUs NVML lists (in PCI bus order), by index.
  int device_count(unsigned* n) const;
  int device_by_index(unsigned index, Device* d) const;
  // The GPU's PCI bus id in NVML's form (normalize_pci_bus_id of nvmlDeviceGetPciInfo_v3's busId).
  int pci_bus_id(Device d, std::string* bus_id) const;
  int name(Device d, std::string* name) const;
  int driver_version(std::string* version) const;

  // Percent of the last sampling period (1/6 s to 1 s by product) during which a kernel ran
  // (nvmlDeviceGetUtilizationRates' gpu); kNotSupported for a GPU split into MIG slices.
  int sm_utilization(Device d, unsigned* pct) const;
  int memory(Device d, Memory* m) const;
  int power_mw(Device d, unsigned* milliwatts) const;
  // Whether the GPU is split into MIG slices now (nvmlDeviceGetMigMode's current mode).
  int mig_enabled(Device d, bool* enabled) const;
  // The driver's buffered SM-utilization samples (NVML_GPU_UTILIZATION_SAMPLES) newer than
  // `after_us`, oldest first; kNotFound when there is none newer.
  int sm_utilization_samples(Device d, unsigned long long after_us, std::vector<Sample>* out) const;

 private:
  struct Symbols;
  Nvml(void* lib, std::string library, std::unique_ptr<Symbols> sym);
  void* lib_;
  std::string library_;
  std::unique_ptr<Symbols> sym_;
};

}  // namespace xlaunch::status
