#include "profile/device_clock.h"

#if XLAUNCH_HAVE_CUDA
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <deque>
#include <vector>

#include "profile/trace.h"
#endif

namespace xlaunch::profile::device {

#if XLAUNCH_HAVE_CUDA
namespace {

struct Pair {
  Phase phase;
  uint64_t host_start_ns;
  cudaEvent_t start, end;
};

struct DeviceClock {
  int device = -1;
  bool open = false;  // a phase is being recorded
  int depth = 0;      // phases of its kind nested in it (the outermost one is timed)
  Pair current{};
  std::deque<Pair> pending;
  std::vector<cudaEvent_t> free_events;
  uint64_t last_end_ns = 0;  // where the previous span on the stream's track ended
};

DeviceClock& clock() {
  static DeviceClock c;
  return c;
}

constexpr size_t kMaxPending = 1024;  // the GPU this far behind: stop recording until it catches up

bool take_event(DeviceClock& c, cudaEvent_t* ev) {
  if (!c.free_events.empty()) {
    *ev = c.free_events.back();
    c.free_events.pop_back();
    return true;
  }
  return cudaEventCreate(ev) == cudaSuccess;
}

}  // namespace

void set_device(int index) { clock().device = index; }

void begin(Phase p, uint64_t host_start_ns) {
  DeviceClock& c = clock();
  if (c.open) {
    if (c.current.phase == p) ++c.depth;
    return;
  }
  if (c.device < 0 || c.pending.size() >= kMaxPending) return;
  if (!take_event(c, &c.current.start)) return;
  if (!take_event(c, &c.current.end)) {
    c.free_events.push_back(c.current.start);
    return;
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(c.device)).stream();
  if (cudaEventRecord(c.current.start, stream) != cudaSuccess) {
    c.free_events.push_back(c.current.start);
    c.free_events.push_back(c.current.end);
    return;
  }
  c.current.phase = p;
  c.current.host_start_ns = host_start_ns;
  c.open = true;
  c.depth = 0;
}

void end(Phase p) {
  DeviceClock& c = clock();
  if (!c.open || c.current.phase != p) return;
  if (c.depth > 0) {
    --c.depth;
    return;
  }
  c.open = false;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(c.device)).stream();
  if (cudaEventRecord(c.current.end, stream) == cudaSuccess) {
    c.pending.push_back(c.current);
  } else {
    c.free_events.push_back(c.current.start);
    c.free_events.push_back(c.current.end);
  }
}

void collect(uint64_t gpu_ns[kPhases]) {
  DeviceClock& c = clock();
  while (!c.pending.empty() && cudaEventQuery(c.pending.front().end) == cudaSuccess) {
    Pair& pr = c.pending.front();
    float ms = 0;
    if (cudaEventElapsedTime(&ms, pr.start, pr.end) == cudaSuccess) {
      const auto ns = static_cast<uint64_t>(static_cast<double>(ms) * 1e6);
      gpu_ns[pr.phase] += ns;
      if (trace::active()) {
        // The stream runs its work in order: a span starts no earlier than the previous one ended.
        const uint64_t start = pr.host_start_ns > c.last_end_ns ? pr.host_start_ns : c.last_end_ns;
        trace::span(trace::kCudaStream, kPhaseNames[pr.phase], start, ns);
        c.last_end_ns = start + ns;
      }
    }
    c.free_events.push_back(pr.start);
    c.free_events.push_back(pr.end);
    c.pending.pop_front();
  }
}

#else

void set_device(int) {}
void begin(Phase, uint64_t) {}
void end(Phase) {}
void collect(uint64_t*) {}

#endif

}  // namespace xlaunch::profile::device
