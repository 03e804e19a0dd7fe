#include "comm/shm_communicator.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/div.h>
#include <ATen/ops/full.h>
#include <ATen/ops/scalar_tensor.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "check.h"
#include "comm/agree.h"
#include "comm/shm_barrier.h"
#include "comm/shm_segment.h"
#include "comm/shared_pool.h"
#include "comm/threaded_communicator.h"
#include "xlaunch/error.h"
#include "xlaunch/kernels/cpu_reduce.h"

namespace xlaunch {

// Lives in shared memory: the barrier of the communication thread's allreduces, followed by each
// rank's table of where its tensors of the current allreduce lie.
struct ShmCommunicator::Control {
  alignas(64) ShmBarrier allreduce_barrier;
};

namespace {

// Places per rank in the table; an allreduce of more tensors runs in rounds of this many.
constexpr size_t kMaxPlaces = 1024;

bool shm_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kDouble; }

kernels::ReduceKind kind_of(ReduceOp op) {
  return op == ReduceOp::Sum ? kernels::ReduceKind::Sum
         : op == ReduceOp::Avg ? kernels::ReduceKind::Avg : kernels::ReduceKind::Max;
}

// The parts of [begin, end) of the concatenated elements of ts[first, first + count), tensor by
// tensor: fn(k, offset, lo, n) for tensor first + k from its element `offset`, element `lo` of
// the concatenation, n elements long.
template <typename Fn>
void for_each_part(const std::vector<at::Tensor>& ts, size_t first, size_t count, int64_t begin, int64_t end, Fn&& fn) {
  int64_t start = 0;
  for (size_t k = 0; k < count && start < end; ++k) {
    const int64_t n = ts[first + k].numel();
    const int64_t lo = std::max(begin, start), hi = std::min(end, start + n);
    if (lo < hi) fn(k, lo - start, lo, hi - lo);
    start += n;
  }
}

}  // namespace

ShmCommunicator::ShmCommunicator(std::shared_ptr<Communicator> fallback, std::shared_ptr<Communicator> agree_over)
    : fallback_(std::move(fallback)), agree_(agree_over ? std::move(agree_over) : fallback_) {
  // The control segment: rank 0 creates it under a random name and tells the others.
  std::string error;
  NewShmSegment ctl;
  ctl_bytes_ = sizeof(Control) + static_cast<size_t>(size()) * kMaxPlaces * sizeof(Place);
  if (rank() == 0) {
    try {
      ctl = create_shm_segment("/xlaunch-" + std::to_string(getpid()) + "-ctl", ctl_bytes_);
      ctl_ = reinterpret_cast<Control*>(ctl.map);
      new (ctl_) Control{};
    } catch (const CommError& e) {
      error = e.what();
    }
  }
  if (agree_failed(error)) throw CommError(error);
  // Rank 0's pid names the job's segments for people (ls /dev/shm); the nonces make them unguessable.
  at::Tensor id = at::empty({2}, at::kLong);
  id[0] = static_cast<int64_t>(getpid());
  id[1] = static_cast<int64_t>(ctl.nonce);
  fallback_->broadcast(id, 0);
  prefix_ = "/xlaunch-" + std::to_string(id[0].item<int64_t>());
  const std::string ctl_name = shm_segment_name(prefix_ + "-ctl", static_cast<uint64_t>(id[1].item<int64_t>()));
  if (rank() != 0) {
    try {
      ctl_ = reinterpret_cast<Control*>(open_shm_segment(ctl_name, ctl_bytes_));
    } catch (const CommError& e) {
      error = e.what();
    }
  }
  const bool failed = agree_failed(error);
  if (rank() == 0) shm_unlink(ctl_name.c_str());  // every rank has it mapped; nothing leaks on a crash
  if (failed) throw CommError(error);
  thread_.start();
}

ShmCommunicator::~ShmCommunicator() {
  thread_.stop();
  for (auto& s : segments_) {
    for (int r = 0; r < static_cast<int>(s.maps.size()); ++r)
      if (r != rank()) munmap(s.maps[r], s.bytes);
    // Our own mapping goes with the last tensor on it (the pool's, with its last block).
    if (s.pool) s.pool->close();
  }
  if (staging_) munmap(staging_, staging_bytes_);
  if (ctl_) munmap(ctl_, ctl_bytes_);
}

ShmCommunicator::Place* ShmCommunicator::places_of(int r) const {
  return reinterpret_cast<Place*>(ctl_ + 1) + static_cast<size_t>(r) * kMaxPlaces;
}

void ShmCommunicator::machine_barrier() { ctl_->allreduce_barrier.arrive_and_wait(size()); }

char* ShmCommunicator::peer_data(int q, size_t k, int64_t bytes) const {
  const Place& at = places_of(q)[k];
  return segments_[at.segment].maps[q] + at.offset + bytes;
}

bool ShmCommunicator::agree_failed(std::string& error) {
  const Agreement a = agree_on_error(*agree_, error);
  if (a.failed()) error = "rank " + std::to_string(a.rank) + ": " + a.message;
  return a.failed();
}

bool ShmCommunicator::map_segments(size_t bytes, Segment& seg, const char* consequence) {
  seg.bytes = std::max<size_t>(1, bytes);
  const std::string prefix = prefix_ + "-" + std::to_string(segments_.size());
  seg.maps.assign(size(), nullptr);
  // Every rank agrees on success at each stage, so a failure anywhere (a full /dev/shm) makes every
  // rank do without, instead of leaving one waiting at a barrier.
  std::string error;
  NewShmSegment mine;
  try {
    mine = create_shm_segment(prefix, seg.bytes);
    seg.maps[rank()] = mine.map;
  } catch (const CommError& e) {
    error = e.what();
  }
  bool failed = agree_failed(error);
  if (!failed) {
    // Each rank's name has its own random part: everyone learns everyone's.
    const at::Tensor nonces = fallback_->allgather(at::full({1}, static_cast<int64_t>(mine.nonce), at::kLong)).view({-1});
    for (int r = 0; r < size() && error.empty(); ++r) {
      if (r == rank()) continue;
      try {
        seg.maps[r] = open_shm_segment(shm_segment_name(prefix, static_cast<uint64_t>(nonces[r].item<int64_t>())),
                                       seg.bytes);
      } catch (const CommError& e) {
        error = e.what();
      }
    }
    failed = agree_failed(error);
  }
  if (seg.maps[rank()]) shm_unlink(shm_segment_name(prefix, mine.nonce).c_str());
  if (!failed) return true;
  for (char* m : seg.maps)
    if (m) munmap(m, seg.bytes);
  if (agree_->rank() == 0) std::fprintf(stderr, "xlaunch: %s: %s\n", consequence, error.c_str());
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
  seg.released = std::make_shared<std::atomic<bool>>(false);
  segments_.push_back(seg);
  // Gradients alias this memory and may outlive the communicator: the mapping is released with the
  // last tensor that uses it.
  const size_t bytes = seg.bytes;
  at::Tensor t = at::from_blob(
      mine, {numel},
      [bytes, released = seg.released](void* p) {
        released->store(true);
        munmap(p, bytes);
      },
      options);
  t.zero_();
  return t;
}

SharedPool* ShmCommunicator::reserve_pool(size_t bytes) {
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
    if (segments_[k].released && segments_[k].released->load()) continue;
    const char* base = segments_[k].maps[rank()];
    if (p >= base && p + n <= base + segments_[k].bytes) {
      where = {static_cast<int64_t>(k), p - base};
      return true;
    }
  }
  return false;
}

bool ShmCommunicator::holds(const at::Tensor& t) const {
  Place unused;
  return locate(t, unused);
}

std::shared_ptr<Work> ShmCommunicator::allreduce_async(at::Tensor t, ReduceOp op) {
  return allreduce_coalesced_async({std::move(t)}, op);
}

std::shared_ptr<Work> ShmCommunicator::allreduce_coalesced_async(std::vector<at::Tensor> ts, ReduceOp op) {
  for (const auto& t : ts) {
    check_cpu_collective_tensor(t, "allreduce");
    reduce_op_for(t.scalar_type(), op, "allreduce");  // refuses Avg over bool here too
  }
  if (size() == 1) return completed_work();
  std::vector<Place> places(ts.size());
  bool shared = !ts.empty();
  for (size_t k = 0; k < ts.size() && shared; ++k)
    shared = ts[k].scalar_type() == ts.front().scalar_type() && locate(ts[k], places[k]);
  if (!shared) return fallback_->allreduce_coalesced_async(std::move(ts), op);
  op = reduce_op_for(ts.front().scalar_type(), op, "allreduce");  // one dtype from here on
  // The work holds the tensors, so their memory stays put until every rank has read it.
  const CollectiveInfo info = CollectiveInfo::of("allreduce", ts);
  return thread_.enqueue(info, [this, ts = std::move(ts), places = std::move(places), op] {
    run_coalesced(ts, places, op);
  });
}

void ShmCommunicator::in_rounds(const std::vector<at::Tensor>& ts, const std::vector<Place>& places,
                                const std::function<void(size_t first, size_t count, int64_t total)>& round) {
  Place* mine = places_of(rank());
  for (size_t first = 0; first < ts.size(); first += kMaxPlaces) {
    const size_t count = std::min(kMaxPlaces, ts.size() - first);
    std::copy_n(places.begin() + first, count, mine);
    int64_t total = 0;
    for (size_t k = 0; k < count; ++k) total += ts[first + k].numel();
    machine_barrier();  // every rank's tensors final, their places published
    round(first, count, total);
  }
}

void ShmCommunicator::run_coalesced(const std::vector<at::Tensor>& ts, const std::vector<Place>& places, ReduceOp op) {
  const bool is_float = ts.front().scalar_type() == at::kFloat;
  const int64_t elem = ts.front().element_size();
  const kernels::ReduceKind kind = kind_of(op);
  std::vector<float*> floats(size());
  std::vector<double*> doubles(size());
  in_rounds(ts, places, [&](size_t first, size_t count, int64_t total) {
    // This rank's slice of the concatenated elements, walked tensor by tensor.
    const int64_t begin = total * rank() / size(), end = total * (rank() + 1) / size();
    for_each_part(ts, first, count, begin, end, [&](size_t k, int64_t offset, int64_t, int64_t n) {
      for (int q = 0; q < size(); ++q) {
        char* p = peer_data(q, k, offset * elem);
        floats[q] = reinterpret_cast<float*>(p);
        doubles[q] = reinterpret_cast<double*>(p);
      }
      if (is_float) kernels::reduce_copies_float(floats.data(), size(), n, kind);
      else kernels::reduce_copies_double(doubles.data(), size(), n, kind);
    });
    machine_barrier();  // every slice written everywhere; tables reusable
  });
}

bool ShmCommunicator::reserve_staging(size_t bytes) {
  // Every machine's staging has grown through the same agreed steps: they are all this large.
  if (bytes <= staging_bytes_) return true;
  // Rank 0 of the machine makes it under a new name and tells the others, as for the control segment.
  std::string error;
  NewShmSegment made;
  const std::string prefix = prefix_ + "-staging" + std::to_string(staging_count_++);
  if (rank() == 0) {
    try {
      made = create_shm_segment(prefix, bytes);
    } catch (const CommError& e) {
      error = e.what();
    }
  }
  bool failed = agree_failed(error);
  char* map = made.map;
  if (!failed) {
    at::Tensor nonce = at::full({1}, static_cast<int64_t>(made.nonce), at::kLong);
    fallback_->broadcast(nonce, 0);
    if (rank() != 0) {
      try {
        map = open_shm_segment(shm_segment_name(prefix, static_cast<uint64_t>(nonce.item<int64_t>())), bytes);
      } catch (const CommError& e) {
        error = e.what();
      }
    }
    failed = agree_failed(error);
  }
  if (rank() == 0 && made.map) shm_unlink(shm_segment_name(prefix, made.nonce).c_str());
  if (failed) {
    if (map) munmap(map, bytes);
    if (agree_->rank() == 0) std::fprintf(stderr, "xlaunch: no larger staging buffer for the hierarchical allreduce: %s\n", error.c_str());
    return false;
  }
  if (staging_) munmap(staging_, staging_bytes_);
  staging_ = map;
  staging_bytes_ = bytes;
  return true;
}

void ShmCommunicator::allreduce_through_staging(const std::vector<at::Tensor>& ts, ReduceOp op, int avg_over,
                                                const std::function<void(at::Tensor& staged)>& across) {
  if (!staging_) throw CommError("hierarchical allreduce on rank " + std::to_string(rank()) + ": no staging buffer");
  const at::ScalarType dtype = ts.front().scalar_type();
  const int64_t elem = ts.front().element_size();
  const int64_t capacity = static_cast<int64_t>(staging_bytes_) / elem;
  const kernels::ReduceKind kind = op == ReduceOp::Max ? kernels::ReduceKind::Max : kernels::ReduceKind::Sum;
  std::vector<Place> places(ts.size());
  for (size_t k = 0; k < ts.size(); ++k)
    if (!locate(ts[k], places[k])) throw CommError("hierarchical allreduce: a tensor is not in shared memory");
  std::vector<const float*> floats(size());
  std::vector<const double*> doubles(size());
  in_rounds(ts, places, [&](size_t first, size_t count, int64_t total) {
    for (int64_t piece = 0; piece < total; piece += capacity) {
      const int64_t m = std::min(capacity, total - piece);
      // 1. This rank's slice [begin, end) of the piece, walked tensor by tensor, into staging.
      const int64_t begin = piece + m * rank() / size(), end = piece + m * (rank() + 1) / size();
      for_each_part(ts, first, count, begin, end, [&](size_t k, int64_t offset, int64_t lo, int64_t n) {
        for (int q = 0; q < size(); ++q) {
          const char* p = peer_data(q, k, offset * elem);
          floats[q] = reinterpret_cast<const float*>(p);
          doubles[q] = reinterpret_cast<const double*>(p);
        }
        char* out = staging_ + (lo - piece) * elem;
        if (dtype == at::kFloat) kernels::reduce_into_float(floats.data(), size(), reinterpret_cast<float*>(out), n, kind);
        else kernels::reduce_into_double(doubles.data(), size(), reinterpret_cast<double*>(out), n, kind);
      });
      machine_barrier();  // the machine's reduction is in staging
      at::Tensor staged = at::from_blob(staging_, {m}, at::TensorOptions().dtype(dtype));
      // 2. Across machines, by this machine's rank 0.
      if (rank() == 0) across(staged);
      machine_barrier();  // staging holds the job's reduction
      // 3. Into this rank's own tensors.
      for_each_part(ts, first, count, piece, piece + m, [&](size_t k, int64_t offset, int64_t lo, int64_t n) {
        at::Tensor dst = ts[first + k].view({-1}).narrow(0, offset, n);
        at::Tensor src = staged.narrow(0, lo - piece, n);
        if (op == ReduceOp::Avg) at::div_out(dst, src, at::scalar_tensor(static_cast<double>(avg_over), dtype));
        else dst.copy_(src);
      });
      machine_barrier();  // staging read by every rank; tables reusable
    }
  });
}

}  // namespace xlaunch
