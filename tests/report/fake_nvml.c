/* A stand-in for libnvidia-ml.so.1 with four GPUs at fixed readings, so that the launcher's NVML
   sampler (launcher/src/observe/nvml.h) is tested on machines without a GPU. Like real NVML, it
   lists the GPUs in PCI bus order; the tests give CUDA another order (as CUDA's default
   FASTEST_FIRST does), so that a GPU found by position instead of by bus id is found wrong. */
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

static int index_of(nvmlDevice_t d) { return (int)((int*)d - devices); }

int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int* n) { *n = kGpus; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t* d) {
  if (i >= kGpus) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
  *d = &devices[i];
  return 0;
}
int nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t* u) {
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
