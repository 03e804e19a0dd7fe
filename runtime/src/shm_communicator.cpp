#include "xlaunch/shm_communicator.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <random>

#include "xlaunch/check.h"
#include "xlaunch/error.h"
#include "xlaunch/grad_capture.h"

namespace xlaunch {

// Lives in shared memory: a generation-counting barrier for the communication thread's allreduces,
// followed by each rank's table of where its tensors of the current allreduce lie.
struct ShmCommunicator::Control {
  struct Barrier {
    std::atomic<uint32_t> arrived;
    std::atomic<uint32_t> generation;
  };
  alignas(64) Barrier barriers[1];
};

namespace {

constexpr int kAllreduceBarrier = 0;
// Places per rank in the table; an allreduce of more tensors runs in rounds of this many.
constexpr size_t kMaxPlaces = 1024;

std::string errno_text() { return std::strerror(errno); }

// Creates (create=true) or opens a shared segment and maps it.
char* map_segment(const std::string& name, size_t bytes, bool create) {
  const int fd = shm_open(name.c_str(), create ? (O_CREAT | O_EXCL | O_RDWR) : O_RDWR, 0600);
  if (fd < 0) throw CommError("shm_open(" + name + ") failed on " + where_am_i() + ": " + errno_text());
  if (create) {
    // Reserve the pages now: a full /dev/shm must fail here, not as SIGBUS in the middle of a step.
    const int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (rc != 0) {
      close(fd);
      shm_unlink(name.c_str());
      throw CommError("cannot reserve " + std::to_string(bytes) + " bytes of shared memory for " + name + " on " +
                      where_am_i() + ": " + std::strerror(rc) + " (is /dev/shm large enough?)");
    }
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) throw CommError("mmap of " + name + " failed on " + where_am_i() + ": " + errno_text());
  return static_cast<char*>(p);
}

void futex_wait(std::atomic<uint32_t>* addr, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAIT, expected, nullptr, nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>* addr) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// The reduction kernels. They are memory-bound, but a scalar loop (what -O2 makes of them) still
// runs at half the speed, so they are vectorised explicitly with GCC's vector extensions; the
// callers below are cloned for AVX2 and picked at load time. (Everything is inlined into those
// clones, so the 32-byte vectors never cross a call in the non-AVX one: -Wpsabi's ABI note does
// not apply.)
#pragma GCC diagnostic ignored "-Wpsabi"
template <typename T>
struct Vec;
template <>
struct Vec<float> {
  typedef float type __attribute__((vector_size(32)));
};
template <>
struct Vec<double> {
  typedef double type __attribute__((vector_size(32)));
};

// a[i] = f(a[i], b[i]) (and b[i] too when both), vector by vector, then the tail element-wise.
template <bool kBoth, typename T, typename F>
inline __attribute__((always_inline)) void zip(T* a, T* b, int64_t n, F f) {
  using V = typename Vec<T>::type;
  constexpr int64_t w = sizeof(V) / sizeof(T);
  int64_t i = 0;
  for (; i + w <= n; i += w) {
    V x, y;
    std::memcpy(&x, a + i, sizeof(V));
    std::memcpy(&y, b + i, sizeof(V));
    const V r = f(x, y);
    std::memcpy(a + i, &r, sizeof(V));
    if (kBoth) std::memcpy(b + i, &r, sizeof(V));
  }
  for (; i < n; ++i) {
    const T r = f(a[i], b[i]);
    a[i] = r;
    if (kBoth) b[i] = r;
  }
}

// Two ranks, sum or average, in one pass: read both copies once, write the result to both.
template <typename T>
inline __attribute__((always_inline)) void pair_kernel(T* a, T* b, int64_t n, T scale) {
  zip<true>(a, b, n, [scale](auto x, auto y) { return (x + y) * scale; });
}
template <typename T>
inline __attribute__((always_inline)) void accumulate_kernel(T* a, T* b, int64_t n, ReduceOp op) {
  if (op == ReduceOp::Max) zip<false>(a, b, n, [](auto x, auto y) { return x > y ? x : y; });
  else zip<false>(a, b, n, [](auto x, auto y) { return x + y; });
}
template <typename T>
inline __attribute__((always_inline)) void scale_kernel(T* a, int64_t n, T s) {
  zip<false>(a, a, n, [s](auto x, auto) { return x * s; });
}

// Reduces n elements held by every rank (ptrs[r]: rank r's copy) and writes the result to all.
template <typename T>
inline __attribute__((always_inline)) void reduce_all(const std::vector<char*>& ptrs, int64_t n, ReduceOp op) {
  const size_t world = ptrs.size();
  T* first = reinterpret_cast<T*>(ptrs[0]);
  if (world == 2 && op != ReduceOp::Max)
    return pair_kernel(first, reinterpret_cast<T*>(ptrs[1]), n, op == ReduceOp::Avg ? T(0.5) : T(1));
  // Accumulate into rank 0's copy, then copy the result to every other rank's.
  for (size_t r = 1; r < world; ++r) accumulate_kernel(first, reinterpret_cast<T*>(ptrs[r]), n, op);
  if (op == ReduceOp::Avg) scale_kernel(first, n, T(1) / T(world));
  for (size_t r = 1; r < world; ++r) std::memcpy(ptrs[r], first, n * sizeof(T));
}

__attribute__((target_clones("avx2", "default"))) void reduce_all_float(const std::vector<char*>& ptrs, int64_t n,
                                                                         ReduceOp op) {
  reduce_all<float>(ptrs, n, op);
}
__attribute__((target_clones("avx2", "default"))) void reduce_all_double(const std::vector<char*>& ptrs, int64_t n,
                                                                          ReduceOp op) {
  reduce_all<double>(ptrs, n, op);
}

bool shm_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kDouble; }

}  // namespace

ShmCommunicator::ShmCommunicator(std::shared_ptr<Communicator> fallback) : fallback_(std::move(fallback)) {
  // A name shared by every rank of this job: rank 0's choice, broadcast.
  at::Tensor id = at::empty({2}, at::kLong);
  std::random_device rd;
  id[0] = static_cast<int64_t>(getpid());
  id[1] = static_cast<int64_t>(rd() & 0x7fffffff);
  fallback_->broadcast(id, 0);
  prefix_ = "/xlaunch-" + std::to_string(id[0].item<int64_t>()) + "-" + std::to_string(id[1].item<int64_t>());
  const std::string ctl_name = prefix_ + "-ctl";
  ctl_bytes_ = sizeof(Control) + static_cast<size_t>(size()) * kMaxPlaces * sizeof(Place);
  std::string error;
  if (rank() == 0) {
    try {
      ctl_ = reinterpret_cast<Control*>(map_segment(ctl_name, ctl_bytes_, true));
      new (ctl_) Control{};
    } catch (const CommError& e) {
      error = e.what();
    }
  }
  if (any_failed(!error.empty())) throw CommError(error.empty() ? "shared memory setup failed on rank 0" : error);
  if (rank() != 0) {
    try {
      ctl_ = reinterpret_cast<Control*>(map_segment(ctl_name, ctl_bytes_, false));
    } catch (const CommError& e) {
      error = e.what();
    }
  }
  const bool failed = any_failed(!error.empty());
  if (rank() == 0) shm_unlink(ctl_name.c_str());  // every rank has it mapped; nothing leaks on a crash
  if (failed) throw CommError(error.empty() ? "shared memory setup failed on another rank" : error);
  start();
}

ShmCommunicator::~ShmCommunicator() {
  stop();
  for (auto& s : segments_) {
    for (int r = 0; r < static_cast<int>(s.maps.size()); ++r)
      if (r != rank()) munmap(s.maps[r], s.bytes);
    // Our own mapping goes with the last tensor on it (the pool's, with its last block).
    if (s.pool) s.pool->close();
  }
  if (ctl_) munmap(ctl_, ctl_bytes_);
}

ShmCommunicator::Place* ShmCommunicator::places_of(int r) const {
  return reinterpret_cast<Place*>(ctl_ + 1) + static_cast<size_t>(r) * kMaxPlaces;
}

bool ShmCommunicator::any_failed(bool failed_here) {
  at::Tensor flag = at::empty({1}, at::kInt);
  flag.fill_(failed_here ? 1 : 0);
  fallback_->allreduce(flag, ReduceOp::Max);
  return flag.item<int>() != 0;
}

void ShmCommunicator::barrier(int which) {
  auto& b = ctl_->barriers[which];
  const uint32_t gen = b.generation.load(std::memory_order_acquire);
  if (b.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(size())) {
    b.arrived.store(0, std::memory_order_relaxed);
    b.generation.fetch_add(1, std::memory_order_acq_rel);
    futex_wake_all(&b.generation);
    return;
  }
  // Spin a little (the others are usually close), then sleep so the core goes to whoever computes.
  for (int i = 0; i < 2000; ++i) {
    if (b.generation.load(std::memory_order_acquire) != gen) return;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  while (b.generation.load(std::memory_order_acquire) == gen) futex_wait(&b.generation, gen);
}

bool ShmCommunicator::map_segments(size_t bytes, Segment& seg, const char* consequence) {
  seg.bytes = std::max<size_t>(1, bytes);
  const auto name_of = [&](int r) { return prefix_ + "-" + std::to_string(segments_.size()) + "-" + std::to_string(r); };
  seg.maps.assign(size(), nullptr);
  // Every rank agrees on success at each stage, so a failure anywhere (a full /dev/shm) makes every
  // rank do without, instead of leaving one waiting at a barrier.
  std::string error;
  try {
    seg.maps[rank()] = map_segment(name_of(rank()), seg.bytes, true);
  } catch (const CommError& e) {
    error = e.what();
  }
  bool failed = any_failed(!error.empty());
  if (!failed) {
    for (int r = 0; r < size() && error.empty(); ++r) {
      if (r == rank()) continue;
      try {
        seg.maps[r] = map_segment(name_of(r), seg.bytes, false);
      } catch (const CommError& e) {
        error = e.what();
      }
    }
    failed = any_failed(!error.empty());
  }
  if (seg.maps[rank()]) shm_unlink(name_of(rank()).c_str());
  if (!failed) return true;
  for (char* m : seg.maps)
    if (m) munmap(m, seg.bytes);
  if (rank() == 0)
    std::fprintf(stderr, "xlaunch: %s: %s\n", consequence,
                 error.empty() ? "shared memory failed on another rank" : error.c_str());
  return false;
}

at::Tensor ShmCommunicator::allocate(int64_t numel, const at::TensorOptions& options) {
  if (!options.device().is_cpu() || !shm_dtype(options.dtype().toScalarType()))
    return Communicator::allocate(numel, options);
  Segment seg;
  if (!map_segments(static_cast<size_t>(numel) * options.dtype().itemsize(), seg,
                    "a gradient bucket falls back to MPI"))
    return Communicator::allocate(numel, options);
  char* mine = seg.maps[rank()];
  segments_.push_back(seg);
  // Gradients alias this memory and may outlive the communicator: the mapping is released with the
  // last tensor that uses it.
  const size_t bytes = seg.bytes;
  at::Tensor t = at::from_blob(mine, {numel}, [bytes](void* p) { munmap(p, bytes); }, options);
  t.zero_();
  return t;
}

SharedPool* ShmCommunicator::reserve_shared_pool(size_t bytes) {
  Segment seg;
  if (!map_segments(bytes, seg, "no gradient pool; fresh gradients are copied into the buckets")) return nullptr;
  seg.pool = SharedPool::create(seg.maps[rank()], seg.bytes, [](char* p, size_t n) { munmap(p, n); });
  segments_.push_back(seg);
  return seg.pool;
}

bool ShmCommunicator::locate(const at::Tensor& t, Place& where) const {
  if (!t.defined() || !t.device().is_cpu() || !shm_dtype(t.scalar_type()) || !t.is_contiguous()) return false;
  if (t.numel() == 0) {
    where = {-1, 0};
    return true;
  }
  const char* p = static_cast<const char*>(t.data_ptr());
  const size_t n = static_cast<size_t>(t.numel()) * t.element_size();
  for (size_t k = 0; k < segments_.size(); ++k) {
    const char* base = segments_[k].maps[rank()];
    if (p >= base && p + n <= base + segments_[k].bytes) {
      where = {static_cast<int64_t>(k), p - base};
      return true;
    }
  }
  return false;
}

bool ShmCommunicator::shares_memory(const at::Tensor& t) const {
  Place unused;
  return locate(t, unused);
}

std::shared_ptr<Work> ShmCommunicator::allreduce_async(at::Tensor t, ReduceOp op) {
  return allreduce_coalesced_async({std::move(t)}, op);
}

std::shared_ptr<Work> ShmCommunicator::allreduce_coalesced_async(std::vector<at::Tensor> ts, ReduceOp op) {
  for (const auto& t : ts) check_cpu_collective_tensor(t, "allreduce");
  if (size() == 1) return completed_work();
  std::vector<Place> places(ts.size());
  bool shared = !ts.empty();
  for (size_t k = 0; k < ts.size() && shared; ++k)
    shared = ts[k].scalar_type() == ts.front().scalar_type() && locate(ts[k], places[k]);
  if (!shared) return fallback_->allreduce_coalesced_async(std::move(ts), op);
  // The work holds the tensors, so their memory stays put until every rank has read it.
  return enqueue("allreduce", [this, ts = std::move(ts), places = std::move(places), op] {
    run_coalesced(ts, places, op);
  });
}

void ShmCommunicator::run_allreduce(at::Tensor& t, ReduceOp op) {
  std::vector<Place> places(1);
  XLAUNCH_ASSERT(locate(t, places[0]), "shm allreduce of a tensor in shared memory");
  run_coalesced({t}, places, op);
}

void ShmCommunicator::run_coalesced(const std::vector<at::Tensor>& ts, const std::vector<Place>& places, ReduceOp op) {
  const bool is_float = ts.front().scalar_type() == at::kFloat;
  const int64_t elem = ts.front().element_size();
  Place* mine = places_of(rank());
  std::vector<char*> ptrs(size());
  for (size_t first = 0; first < ts.size(); first += kMaxPlaces) {
    const size_t count = std::min(kMaxPlaces, ts.size() - first);
    std::copy_n(places.begin() + first, count, mine);
    int64_t total = 0;
    for (size_t k = 0; k < count; ++k) total += ts[first + k].numel();
    barrier(kAllreduceBarrier);  // every rank's tensors are final and their places published
    // This rank's slice of the concatenated elements, walked tensor by tensor.
    const int64_t begin = total * rank() / size(), end = total * (rank() + 1) / size();
    int64_t start = 0;
    for (size_t k = 0; k < count && start < end; ++k) {
      const int64_t n = ts[first + k].numel();
      const int64_t lo = std::max(begin, start), hi = std::min(end, start + n);
      if (lo < hi) {
        for (int q = 0; q < size(); ++q) {
          const Place& at = places_of(q)[k];
          ptrs[q] = segments_[at.segment].maps[q] + at.offset + (lo - start) * elem;
        }
        if (is_float) reduce_all_float(ptrs, hi - lo, op);
        else reduce_all_double(ptrs, hi - lo, op);
      }
      start += n;
    }
    barrier(kAllreduceBarrier);  // every slice is written everywhere; the tables may be reused
  }
}

}  // namespace xlaunch
