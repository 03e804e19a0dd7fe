/* A stand-in for libnvidia-ml.so.1 with two GPUs at fixed readings, so that the launcher's NVML
   sampler (launcher/src/nvml.h) is tested on machines without a GPU. */
typedef void* nvmlDevice_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;

static int devices[2];
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int* n) { *n = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t* d) { *d = &devices[i]; return i < 2 ? 0 : 1; }
int nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t* u) {
  u->gpu = d == &devices[0] ? 42 : 97;
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
