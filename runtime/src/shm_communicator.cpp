#include "xlaunch/shm_communicator.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <random>

#include "xlaunch/check.h"
#include "xlaunch/error.h"

namespace xlaunch {

// Lives in shared memory: a generation-counting barrier for the communication thread's allreduces.
struct ShmCommunicator::Control {
  struct Barrier {
    std::atomic<uint32_t> arrived;
    std::atomic<uint32_t> generation;
  };
  Barrier barriers[1];
};

namespace {

constexpr int kAllreduceBarrier = 0;

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

template <typename T>
void reduce_slice(const std::vector<char*>& maps, int64_t begin, int64_t end, ReduceOp op, int world) {
  T* first = reinterpret_cast<T*>(maps[0]);
  if (maps.size() == 2 && op != ReduceOp::Max) {
    // The common case in one pass: read both slices once, write the result to both.
    T* second = reinterpret_cast<T*>(maps[1]);
    const T scale = op == ReduceOp::Avg ? T(0.5) : T(1);
    for (int64_t i = begin; i < end; ++i) {
      const T v = (first[i] + second[i]) * scale;
      first[i] = v;
      second[i] = v;
    }
    return;
  }
  // Accumulate into rank 0's bucket, then copy the slice to every other rank's bucket.
  for (size_t r = 1; r < maps.size(); ++r) {
    const T* other = reinterpret_cast<const T*>(maps[r]);
    if (op == ReduceOp::Max)
      for (int64_t i = begin; i < end; ++i) first[i] = first[i] > other[i] ? first[i] : other[i];
    else
      for (int64_t i = begin; i < end; ++i) first[i] += other[i];
  }
  if (op == ReduceOp::Avg) {
    const T inv = T(1) / T(world);
    for (int64_t i = begin; i < end; ++i) first[i] *= inv;
  }
  for (size_t r = 1; r < maps.size(); ++r)
    std::memcpy(reinterpret_cast<T*>(maps[r]) + begin, first + begin, (end - begin) * sizeof(T));
}

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
  std::string error;
  if (rank() == 0) {
    try {
      ctl_ = reinterpret_cast<Control*>(map_segment(ctl_name, sizeof(Control), true));
      new (ctl_) Control{};
    } catch (const CommError& e) {
      error = e.what();
    }
  }
  if (any_failed(!error.empty())) throw CommError(error.empty() ? "shared memory setup failed on rank 0" : error);
  if (rank() != 0) {
    try {
      ctl_ = reinterpret_cast<Control*>(map_segment(ctl_name, sizeof(Control), false));
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
  for (auto& s : segments_)
    for (int r = 0; r < static_cast<int>(s.maps.size()); ++r)
      if (r != rank()) munmap(s.maps[r], s.bytes);  // our own mapping goes with the last tensor on it
  if (ctl_) munmap(ctl_, sizeof(Control));
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

at::Tensor ShmCommunicator::allocate(int64_t numel, const at::TensorOptions& options) {
  const auto dtype = options.dtype().toScalarType();
  if (!options.device().is_cpu() || (dtype != at::kFloat && dtype != at::kDouble))
    return Communicator::allocate(numel, options);
  Segment seg;
  seg.bytes = std::max<size_t>(1, static_cast<size_t>(numel) * c10::elementSize(dtype));
  const auto name_of = [&](int r) { return prefix_ + "-" + std::to_string(segments_.size()) + "-" + std::to_string(r); };
  seg.maps.assign(size(), nullptr);
  // Every rank agrees on success at each stage, so a failure anywhere (a full /dev/shm) makes every
  // rank fall back to plain memory for this buffer instead of leaving one waiting at a barrier.
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
  if (failed) {
    for (char* m : seg.maps)
      if (m) munmap(m, seg.bytes);
    if (rank() == 0)
      std::fprintf(stderr, "xlaunch: a gradient bucket falls back to MPI: %s\n",
                   error.empty() ? "shared memory failed on another rank" : error.c_str());
    return Communicator::allocate(numel, options);
  }
  char* mine = seg.maps[rank()];
  segments_.push_back(seg);
  // Gradients alias this memory and may outlive the communicator: the mapping is released with the
  // last tensor that uses it.
  const size_t bytes = seg.bytes;
  at::Tensor t = at::from_blob(mine, {numel}, [bytes](void* p) { munmap(p, bytes); }, options);
  t.zero_();
  return t;
}

const ShmCommunicator::Segment* ShmCommunicator::find(const at::Tensor& t) const {
  for (const auto& s : segments_)
    if (static_cast<char*>(t.data_ptr()) == s.maps[rank()] && t.numel() * t.element_size() == static_cast<int64_t>(s.bytes))
      return &s;
  return nullptr;
}

std::shared_ptr<Work> ShmCommunicator::allreduce_async(at::Tensor t, ReduceOp op) {
  if (size() == 1) return completed_work();
  if (!find(t)) return fallback_->allreduce_async(t, op);
  return ThreadedCommunicator::allreduce_async(t, op);
}

void ShmCommunicator::run_allreduce(at::Tensor& t, ReduceOp op) {
  const Segment* seg = find(t);
  XLAUNCH_ASSERT(seg != nullptr, "shm allreduce on a buffer from allocate()");
  const int64_t n = t.numel();
  const int64_t begin = n * rank() / size(), end = n * (rank() + 1) / size();
  barrier(kAllreduceBarrier);  // every rank's bucket is final
  if (t.scalar_type() == at::kFloat) reduce_slice<float>(seg->maps, begin, end, op, size());
  else reduce_slice<double>(seg->maps, begin, end, op, size());
  barrier(kAllreduceBarrier);  // every slice is written everywhere
}

}  // namespace xlaunch
