/* A stand-in for libnvidia-ml.so.1 with four GPUs at fixed readings, so that the launcher's NVML
   sampler (launcher/src/observe/nvml.h) and a rank's GPU use (runtime/src/track/gpu_use.h) are
   tested on machines without a GPU. Like real NVML, it lists the GPUs in PCI bus order; the tests
   give CUDA another order (as CUDA's default FASTEST_FIRST does), so that a GPU found by position
   instead of by bus id is found wrong.

   The driver's buffer of utilization samples (nvmlDeviceGetSamples) is what a test puts there,
   through the fake_nvml_* functions below (the test dlopens this same library to reach them); a
   GPU may be switched to MIG mode, where, as with real NVML, utilization is not supported. */
#include <stdio.h>
#include <string.h>

typedef void* nvmlDevice_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;

enum { kGpus = 4 };
static int devices[kGpus];
static const unsigned int kBus[kGpus] = {0x1b, 0x3d, 0x88, 0xb2};
static const unsigned int kSm[kGpus] = {42, 97, 61, 13};

typedef union { double dVal; unsigned int uiVal; unsigned long long ullVal; } nvmlValue_t;
typedef struct { unsigned long long timeStamp; nvmlValue_t sampleValue; } nvmlSample_t;
enum { kMaxSamples = 8 };  /* the driver's ring: the oldest sample goes when a ninth comes */
static nvmlSample_t ring[kGpus][kMaxSamples];
static unsigned int ring_count[kGpus], ring_next[kGpus];
static unsigned int mig[kGpus];
static int samples_supported = 1;

static int index_of(nvmlDevice_t d) { return (int)((int*)d - devices); }

/* The test's controls. */
void fake_nvml_reset(void) {
  memset(ring_count, 0, sizeof ring_count);
  memset(ring_next, 0, sizeof ring_next);
  memset(mig, 0, sizeof mig);
  samples_supported = 1;
}
void fake_nvml_add_sample(unsigned int gpu, unsigned long long timestamp_us, unsigned int sm_pct) {
  nvmlSample_t* s = &ring[gpu][ring_next[gpu]];
  s->timeStamp = timestamp_us;
  s->sampleValue.uiVal = sm_pct;
  ring_next[gpu] = (ring_next[gpu] + 1) % kMaxSamples;
  if (ring_count[gpu] < kMaxSamples) ++ring_count[gpu];
}
void fake_nvml_set_mig(unsigned int gpu, unsigned int on) { mig[gpu] = on; }
void fake_nvml_set_samples_supported(int on) { samples_supported = on; }

int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int* n) { *n = kGpus; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t* d) {
  if (i >= kGpus) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
  *d = &devices[i];
  return 0;
}
int nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t* u) {
  if (mig[index_of(d)]) return 3; /* NVML_ERROR_NOT_SUPPORTED */
  u->gpu = kSm[index_of(d)];
  u->memory = 10;
  return 0;
}
int nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t* m) {
  (void)d;
  m->total = 80ull << 30;
  m->used = 20ull << 30;
  m->free = m->total - m->used;
  return 0;
}
int nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int* mw) { (void)d; *mw = 250000; return 0; }
int nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t* p) {
  const unsigned int bus = kBus[index_of(d)];
  memset(p, 0, sizeof *p);
  p->bus = bus;
  snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "0000:%02X:00.0", bus);
  snprintf(p->busId, sizeof p->busId, "00000000:%02X:00.0", bus);
  return 0;
}
int nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int* current, unsigned int* pending) {
  *current = *pending = mig[index_of(d)];
  return 0;
}
/* As NVML does: without a buffer, how many samples it may return; with one, those newer than
   last_seen (NVML_ERROR_NOT_FOUND when none is), in the ring's order (not sorted). */
int nvmlDeviceGetSamples(nvmlDevice_t d, int type, unsigned long long last_seen, int* value_type,
                         unsigned int* count, nvmlSample_t* samples) {
  const int g = index_of(d);
  unsigned int i, n = 0;
  if (!samples_supported || type != 1 /* NVML_GPU_UTILIZATION_SAMPLES */) return 3;
  if (mig[g]) return 3;
  *value_type = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
  if (!samples) {
    *count = kMaxSamples;
    return 0;
  }
  for (i = 0; i < ring_count[g] && n < *count; ++i)
    if (ring[g][i].timeStamp > last_seen) samples[n++] = ring[g][i];
  *count = n;
  return n ? 0 : 6; /* NVML_ERROR_NOT_FOUND */
}
int nvmlDeviceGetName(nvmlDevice_t d, char* name, unsigned int length) {
  snprintf(name, length, "Fake GPU %d", index_of(d));
  return 0;
}
int nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  snprintf(version, length, "999.1");
  return 0;
}
const char* nvmlErrorString(int rc) {
  switch (rc) {
    case 0: return "Success";
    case 3: return "Not Supported";
    case 6: return "Not Found";
    default: return "Unknown Error";
  }
}
