#include "profile/device_clock.h"

#if XLAUNCH_HAVE_CUDA
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "profile/phase_clock.h"
#include "profile/trace.h"
#endif

namespace xlaunch::profile::device {

#if XLAUNCH_HAVE_CUDA
namespace {

// c10's event, with timing: created on the device of the stream it is first recorded on (never on
// the thread's current device, which may be another GPU), destroyed on it.
struct CudaEvent {
  c10::cuda::CUDAEvent ev{cudaEventDefault};
  void record(int device) { ev.record(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device))); }
  bool query() const { return ev.query(); }
  float elapsed_ms(const CudaEvent& end) const { return ev.elapsed_time(end.ev); }
  static void clear_error() { (void)cudaGetLastError(); }
};

PhaseClock<CudaEvent>& clock() {
  static PhaseClock<CudaEvent> c;
  return c;
}

uint64_t g_last_end_ns = 0;  // where the previous span on the stream's track ended

}  // namespace

void set_device(int index) { clock().set_device(index); }
void begin(Phase p, uint64_t host_start_ns) { clock().begin(p, host_start_ns); }
void end(Phase p) { clock().end(p); }

void collect(uint64_t gpu_ns[kPhases]) {
  clock().collect([&](Phase p, uint64_t host_start_ns, uint64_t ns) {
    gpu_ns[p] += ns;
    if (!trace::active()) return;
    // The stream runs its work in order: a span starts no earlier than the previous one ended.
    const uint64_t start = host_start_ns > g_last_end_ns ? host_start_ns : g_last_end_ns;
    trace::span(trace::kCudaStream, kPhaseNames[p], start, ns);
    g_last_end_ns = start + ns;
  });
}

#else

void set_device(int) {}
void begin(Phase, uint64_t) {}
void end(Phase) {}
void collect(uint64_t*) {}

#endif

}  // namespace xlaunch::profile::device
