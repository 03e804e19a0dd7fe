#include "xlaunch/status/nvml_api.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "xlaunch/env_vars.h"
#include "xlaunch/status/step_stats.h"

namespace xlaunch::status {
namespace {

// NVML's C types for the entry points used (as nvml.h declares them; it is not needed to build).
using nvmlReturn_t = int;
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
union nvmlValue_t {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
  unsigned short usVal;
};
struct nvmlSample_t {
  unsigned long long timeStamp;
  nvmlValue_t sampleValue;
};
// nvmlValueType_t
enum { kDouble = 0, kUnsignedInt = 1, kUnsignedLong = 2, kUnsignedLongLong = 3, kSignedLongLong = 4,
       kSignedInt = 5, kUnsignedShort = 6 };
constexpr int kGpuUtilizationSamples = 1;  // NVML_GPU_UTILIZATION_SAMPLES
constexpr unsigned kMigEnabled = 1;        // NVML_DEVICE_MIG_ENABLE

double value_of(const nvmlValue_t& v, int type) {
  switch (type) {
    case kDouble: return v.dVal;
    case kUnsignedInt: return v.uiVal;
    case kUnsignedLong: return static_cast<double>(v.ulVal);
    case kUnsignedLongLong: return static_cast<double>(v.ullVal);
    case kSignedLongLong: return static_cast<double>(v.sllVal);
    case kSignedInt: return v.siVal;
    case kUnsignedShort: return v.usVal;
    default: return v.uiVal;  // utilization samples are unsigned int on every driver seen
  }
}

}  // namespace

struct Nvml::Symbols {
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*count)(unsigned int*) = nullptr;
  nvmlReturn_t (*by_index)(unsigned int, Device*) = nullptr;
  nvmlReturn_t (*pci)(Device, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*name)(Device, char*, unsigned int) = nullptr;
  nvmlReturn_t (*driver)(char*, unsigned int) = nullptr;
  nvmlReturn_t (*util)(Device, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(Device, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*power)(Device, unsigned int*) = nullptr;
  nvmlReturn_t (*mig)(Device, unsigned int*, unsigned int*) = nullptr;
  nvmlReturn_t (*samples)(Device, int, unsigned long long, int*, unsigned int*, nvmlSample_t*) = nullptr;
};

std::unique_ptr<Nvml> Nvml::open(const std::string& library, std::string* why) {
  std::string name = library.empty() ? env::get_string(env::kNvmlLibrary) : library;
  if (name.empty()) name = env::kNvmlLibrary.default_value;
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    *why = "NVML (" + name + ") not found: no NVIDIA driver on this machine";
    return nullptr;
  }
  auto s = std::make_unique<Symbols>();
  // Each symbol in its own type; a missing one stays nullptr and its query answers kFunctionNotFound.
  const auto sym = [&](auto& fn, const char* n) { fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, n)); };
  nvmlReturn_t (*init)() = nullptr;
  sym(init, "nvmlInit_v2");
  sym(s->shutdown, "nvmlShutdown");
  sym(s->error_string, "nvmlErrorString");
  sym(s->count, "nvmlDeviceGetCount_v2");
  sym(s->by_index, "nvmlDeviceGetHandleByIndex_v2");
  sym(s->pci, "nvmlDeviceGetPciInfo_v3");
  sym(s->name, "nvmlDeviceGetName");
  sym(s->driver, "nvmlSystemGetDriverVersion");
  sym(s->util, "nvmlDeviceGetUtilizationRates");
  sym(s->memory, "nvmlDeviceGetMemoryInfo");
  sym(s->power, "nvmlDeviceGetPowerUsage");
  sym(s->mig, "nvmlDeviceGetMigMode");
  sym(s->samples, "nvmlDeviceGetSamples");
  if (!init) {
    *why = "NVML (" + name + ") did not initialize: it has no nvmlInit_v2 (a driver older than NVML 5.319?)";
    dlclose(lib);
    return nullptr;
  }
  if (const nvmlReturn_t rc = init(); rc != kSuccess) {
    const char* said = s->error_string ? s->error_string(rc) : nullptr;
    *why = "NVML (" + name + ") did not initialize: nvmlInit_v2 returned " + std::to_string(rc) +
           (said ? std::string(" (") + said + ")" : "");
    dlclose(lib);
    return nullptr;
  }
  return std::unique_ptr<Nvml>(new Nvml(lib, name, std::move(s)));
}

Nvml::Nvml(void* lib, std::string library, std::unique_ptr<Symbols> sym)
    : lib_(lib), library_(std::move(library)), sym_(std::move(sym)) {}

Nvml::~Nvml() {
  if (sym_->shutdown) sym_->shutdown();
  dlclose(lib_);
}

std::string Nvml::error_string(int code) const {
  const char* said = sym_->error_string ? sym_->error_string(code) : nullptr;
  if (code == kFunctionNotFound && !said) said = "Function Not Found";
  return "NVML error " + std::to_string(code) + (said ? std::string(" (") + said + ")" : "");
}

int Nvml::device_count(unsigned* n) const { return sym_->count ? sym_->count(n) : kFunctionNotFound; }

int Nvml::device_by_index(unsigned index, Device* d) const {
  return sym_->by_index ? sym_->by_index(index, d) : kFunctionNotFound;
}

int Nvml::pci_bus_id(Device d, std::string* bus_id) const {
  if (!sym_->pci) return kFunctionNotFound;
  nvmlPciInfo_t info{};
  const int rc = sym_->pci(d, &info);
  if (rc == kSuccess) *bus_id = normalize_pci_bus_id(std::string(info.busId, strnlen(info.busId, sizeof info.busId)));
  return rc;
}

int Nvml::name(Device d, std::string* name) const {
  if (!sym_->name) return kFunctionNotFound;
  char buf[96] = {};  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
  const int rc = sym_->name(d, buf, sizeof buf - 1);
  if (rc == kSuccess) *name = buf;
  return rc;
}

int Nvml::driver_version(std::string* version) const {
  if (!sym_->driver) return kFunctionNotFound;
  char buf[80] = {};  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE
  const int rc = sym_->driver(buf, sizeof buf - 1);
  if (rc == kSuccess) *version = buf;
  return rc;
}

int Nvml::sm_utilization(Device d, unsigned* pct) const {
  if (!sym_->util) return kFunctionNotFound;
  nvmlUtilization_t u{};
  const int rc = sym_->util(d, &u);
  if (rc == kSuccess) *pct = u.gpu;
  return rc;
}

int Nvml::memory(Device d, Memory* m) const {
  if (!sym_->memory) return kFunctionNotFound;
  nvmlMemory_t raw{};
  const int rc = sym_->memory(d, &raw);
  if (rc == kSuccess) *m = {raw.total, raw.free, raw.used};
  return rc;
}

int Nvml::power_mw(Device d, unsigned* milliwatts) const {
  return sym_->power ? sym_->power(d, milliwatts) : kFunctionNotFound;
}

int Nvml::mig_enabled(Device d, bool* enabled) const {
  if (!sym_->mig) return kFunctionNotFound;
  unsigned current = 0, pending = 0;
  const int rc = sym_->mig(d, &current, &pending);
  if (rc == kSuccess) *enabled = current == kMigEnabled;
  return rc;
}

int Nvml::sm_utilization_samples(Device d, unsigned long long after_us, std::vector<Sample>* out) const {
  if (!sym_->samples) return kFunctionNotFound;
  // Asked without a buffer, NVML says how many samples it may return; then it fills that many.
  int type = kUnsignedInt;
  unsigned int n = 0;
  int rc = sym_->samples(d, kGpuUtilizationSamples, after_us, &type, &n, nullptr);
  if (rc != kSuccess) return rc;
  if (n == 0) return kNotFound;
  std::vector<nvmlSample_t> raw(n);
  rc = sym_->samples(d, kGpuUtilizationSamples, after_us, &type, &n, raw.data());
  if (rc != kSuccess) return rc;
  out->clear();
  for (unsigned int i = 0; i < n && i < raw.size(); ++i)
    if (raw[i].timeStamp > after_us) out->push_back({raw[i].timeStamp, value_of(raw[i].sampleValue, type)});
  // The driver's buffer is a ring: its order is not the samples' order.
  std::sort(out->begin(), out->end(), [](const Sample& a, const Sample& b) { return a.timestamp_us < b.timestamp_us; });
  return out->empty() ? kNotFound : kSuccess;
}

}  // namespace xlaunch::status
