#include "comm/hierarchical_communicator.h"

#include <algorithm>
#include <cstring>
#include <map>

#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>

#include "check.h"
#include "comm/mpi_half_ops.h"
#include "comm/threaded_communicator.h"
#include "xlaunch/error.h"
#include "xlaunch/kernels/cpu_reduce.h"

namespace xlaunch {
namespace {

// The first staging buffer, and the most allocate() grows it to: larger lists go in pieces.
constexpr size_t kMinStagingBytes = size_t{1} << 20;
constexpr size_t kMaxStagingBytes = size_t{256} << 20;

// From this size on, the leaders reduce-scatter and allgather in a ring (each link carries the piece
// once in each direction, and each leader reduces only its block) instead of MPI_Allreduce.
constexpr int64_t kReduceScatterBytes = int64_t{1} << 20;

bool shm_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kDouble; }

// The staging buffer's MPI type for reductions (shared memory holds float and double only).
MPI_Datatype mpi_type(const at::Tensor& staged) { return staged.scalar_type() == at::kFloat ? MPI_FLOAT : MPI_DOUBLE; }

}  // namespace

MachineLayout machine_layout(const std::vector<std::string>& domains) {
  MachineLayout layout;
  std::map<std::string, int> first;  // domain -> lowest rank in it
  std::map<int, int> count;          // leader -> ranks
  for (int r = 0; r < static_cast<int>(domains.size()); ++r) {
    const int leader = first.emplace(domains[r], r).first->second;
    layout.leader.push_back(leader);
    ++count[leader];
  }
  layout.machines = static_cast<int>(count.size());
  layout.ranks_per_machine = count.empty() ? 0 : count.begin()->second;
  for (const auto& [leader, n] : count)
    if (n != layout.ranks_per_machine) layout.ranks_per_machine = 0;
  return layout;
}

StagingOrder staging_order(const MachineLayout& layout) {
  StagingOrder order;
  const int world = static_cast<int>(layout.leader.size());
  for (int q = 0; q < world; ++q) order.rank.push_back(q);
  // Stable: within a machine, ranks stay in rank order.
  std::stable_sort(order.rank.begin(), order.rank.end(),
                   [&](int a, int b) { return layout.leader[a] < layout.leader[b]; });
  order.block.assign(world, 0);
  for (int b = 0; b < world; ++b) {
    const int q = order.rank[b];
    order.block[q] = b;
    if (b == 0 || layout.leader[q] != layout.leader[order.rank[b - 1]]) order.machine_first.push_back(b);
  }
  order.machine_first.push_back(world);
  return order;
}

std::string auto_cpu_allreduce(const MachineLayout& layout) {
  if (layout.leader.size() < 2) return "mpi";
  if (layout.machines == 1) return "shm";
  // One rank per machine has nothing to share; uneven machines would log different collectives on
  // their machine communicators (one of a single rank logs none).
  if (layout.ranks_per_machine > 1) return "hier";
  return "mpi";
}

HierarchicalCommunicator::HierarchicalCommunicator(std::shared_ptr<MpiCommunicator> world, const MachineLayout& layout)
    : world_(std::move(world)), order_(staging_order(layout)) {
  const int me = world_->rank();
  if (static_cast<int>(layout.leader.size()) != world_->size())
    throw UsageError("HierarchicalCommunicator: the layout has " + std::to_string(layout.leader.size()) +
                     " ranks, the world " + std::to_string(world_->size()));
  local_ = world_->split(layout.leader[me], me);
  leaders_ = world_->split(local_->rank() == 0 ? 0 : MPI_UNDEFINED, me);
  // Ranked by their machine's leader: replica m is on the m-th machine, whatever the placement.
  replicas_ = world_->split(local_->rank(), layout.leader[me]);
  // Agreed over the world: on failure every rank throws here alike.
  shm_ = std::make_unique<ShmCommunicator>(local_, world_);
  if (!shm_->reserve_staging(kMinStagingBytes))
    throw CommError("no staging buffer in shared memory for the hierarchical allreduce (see above)");
}

HierarchicalCommunicator::~HierarchicalCommunicator() {
  // This communicator's items on the world's thread reach into it: let them finish first.
  world_->comm_thread().run_local([] {});
}

at::Tensor HierarchicalCommunicator::allocate(int64_t numel, const at::TensorOptions& options) {
  if (!options.device().is_cpu() || !shm_dtype(options.dtype().toScalarType()))
    return Communicator::allocate(numel, options);
  // Without a larger staging buffer the bucket still works, in pieces of the one there is.
  shm_->reserve_staging(std::min(kMaxStagingBytes, static_cast<size_t>(numel) * options.dtype().itemsize()));
  return shm_->allocate(numel, options);
}

std::shared_ptr<Work> HierarchicalCommunicator::allreduce_async(at::Tensor t, ReduceOp op) {
  return allreduce_coalesced_async({std::move(t)}, op);
}

bool HierarchicalCommunicator::all_held(const std::vector<at::Tensor>& ts) const {
  bool shared = !ts.empty();
  for (size_t k = 0; k < ts.size() && shared; ++k)
    shared = ts[k].scalar_type() == ts.front().scalar_type() && shm_->holds(ts[k]);
  return shared;
}

std::shared_ptr<Work> HierarchicalCommunicator::through_staging(std::vector<at::Tensor> ts, ReduceOp op,
                                                                std::function<void(at::Tensor&)> across) {
  // The work holds the tensors, so their memory stays put until every rank has read it.
  const CollectiveInfo info = CollectiveInfo::of("allreduce", ts);
  return world_->comm_thread().enqueue(info, [this, ts = std::move(ts), op, across = std::move(across)] {
    shm_->allreduce_through_staging(ts, op, size(), across);
  });
}

std::shared_ptr<Work> HierarchicalCommunicator::allreduce_coalesced_async(std::vector<at::Tensor> ts, ReduceOp op) {
  for (const auto& t : ts) {
    check_cpu_collective_tensor(t, "allreduce");
    reduce_op_for(t.scalar_type(), op, "allreduce");  // refuses Avg over bool here too
  }
  if (!all_held(ts)) return world_->allreduce_coalesced_async(std::move(ts), op);
  op = reduce_op_for(ts.front().scalar_type(), op, "allreduce");  // all_held: one dtype
  return through_staging(std::move(ts), op, [this, op](at::Tensor& staged) { across_machines(staged, op); });
}

std::shared_ptr<Work> HierarchicalCommunicator::reduce_scatter_async(at::Tensor in, at::Tensor out, ReduceOp op) {
  check_reduce_scatter_args(*this, in, out);
  check_cpu_collective_tensor(in, "reduce_scatter");
  op = reduce_op_for(in.scalar_type(), op, "reduce_scatter");
  if (size() == 1 || out.numel() == 0 || !shm_->holds(in))
    return world_->reduce_scatter_async(std::move(in), std::move(out), op);
  // The work holds the tensors, so their memory stays put until every rank has read it.
  const CollectiveInfo info = CollectiveInfo::of("reduce_scatter", in);
  return world_->comm_thread().enqueue(info, [this, in = std::move(in), out = std::move(out), op] {
    shm_->reduce_scatter_through_staging(in, out, op, size(), order_.rank, order_.block[rank()],
                                         [this, op](at::Tensor& staged, int64_t width) {
                                           reduce_scatter_across(staged, width, op);
                                         });
  });
}

std::shared_ptr<Work> HierarchicalCommunicator::allgather_async(at::Tensor in, at::Tensor out) {
  check_cpu_collective_tensor(in, "allgather");
  check_cpu_collective_tensor(out, "allgather");
  if (out.numel() != in.numel() * size() || out.scalar_type() != in.scalar_type())
    throw UsageError("allgather: the output must hold world_size * input elements of the input's dtype");
  if (size() == 1 || in.numel() == 0 || !(shm_->holds(in) || shm_->holds(out)))
    return world_->allgather_async(std::move(in), std::move(out));
  const CollectiveInfo info = CollectiveInfo::of("allgather", in);
  return world_->comm_thread().enqueue(info, [this, in = std::move(in), out = std::move(out)] {
    shm_->allgather_through_staging(in, out, order_.rank, order_.block[rank()],
                                    [this](at::Tensor& staged, int64_t width) { allgather_across(staged, width); });
  });
}

std::shared_ptr<Work> HierarchicalCommunicator::allreduce_compressed_async(std::vector<at::Tensor> ts, ReduceOp op,
                                                                          at::ScalarType wire) {
  if ((wire != at::kHalf && wire != at::kBFloat16) || !all_held(ts))
    return Communicator::allreduce_compressed_async(std::move(ts), op, wire);
  for (const auto& t : ts) check_cpu_collective_tensor(t, "allreduce");
  return through_staging(std::move(ts), op,
                         [this, op, wire](at::Tensor& staged) { across_machines_in(wire, staged, op); });
}

void HierarchicalCommunicator::across_machines_in(at::ScalarType wire, at::Tensor& staged, ReduceOp op) {
  if (leaders_->size() == 1) return;
  // Divided by the job's size before the cast (a sum of float16 values overflows sooner), and
  // multiplied back after: the copy-back divides for Avg. Every leader ends with the same values.
  const at::Tensor scale = at::scalar_tensor(op == ReduceOp::Max ? 1.0 : static_cast<double>(size()));
  at::Tensor on_wire = at::empty({staged.numel()}, staged.options().dtype(wire));
  at::div_out(on_wire, staged, scale);
  // One call: the staging buffer (at most 256 MiB) holds fewer than INT_MAX 16-bit elements.
  XLAUNCH_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, on_wire.data_ptr(), static_cast<int>(on_wire.numel()), MPI_UINT16_T,
                                  mpi_half_op(wire, op), leaders_->mpi_comm()));
  staged.copy_(on_wire);
  staged.mul_(scale);  // in float: a product in the 16-bit type would round once more
}

void HierarchicalCommunicator::across_machines(at::Tensor& staged, ReduceOp op) {
  const int machines = leaders_->size();
  if (machines == 1) return;
  const int64_t n = staged.numel();
  // n fits an int: the staging buffer is at most 256 MiB.
  if (n * staged.element_size() < kReduceScatterBytes || n < machines) {
    XLAUNCH_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, staged.data_ptr(), static_cast<int>(n), mpi_type(staged),
                                    op == ReduceOp::Max ? MPI_MAX : MPI_SUM, leaders_->mpi_comm()));
    return;
  }
  // A ring reduce-scatter, then an allgather of the reduced blocks. (Open MPI's MPI_Reduce_scatter
  // between 2 leaders over TCP ran at about 70% of this on the simulated 1 Gbit/s link.)
  std::vector<int64_t> first(machines + 1);
  for (int i = 0; i <= machines; ++i) first[i] = n * i / machines;
  ring_reduce_scatter(staged, first, op);
  ring_allgather(staged, first);
}

void HierarchicalCommunicator::reduce_scatter_across(at::Tensor& staged, int64_t width, ReduceOp op) {
  const int machines = leaders_->size();
  if (machines == 1) return;
  // Small windows are latency-bound: reducing all of it costs no more than reduce-scattering it.
  if (staged.numel() * staged.element_size() < kReduceScatterBytes) {
    XLAUNCH_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, staged.data_ptr(), static_cast<int>(staged.numel()),
                                    mpi_type(staged), op == ReduceOp::Max ? MPI_MAX : MPI_SUM, leaders_->mpi_comm()));
    return;
  }
  ring_reduce_scatter(staged, machine_blocks(width), op);
}

void HierarchicalCommunicator::allgather_across(at::Tensor& staged, int64_t width) {
  if (leaders_->size() > 1) ring_allgather(staged, machine_blocks(width));
}

std::vector<int64_t> HierarchicalCommunicator::machine_blocks(int64_t width) const {
  std::vector<int64_t> first;
  for (int b : order_.machine_first) first.push_back(b * width);
  return first;
}

void HierarchicalCommunicator::ring_reduce_scatter(at::Tensor& data, const std::vector<int64_t>& first, ReduceOp op) {
  const int machines = leaders_->size(), me = leaders_->rank();
  const int right = (me + 1) % machines, left = (me + machines - 1) % machines;
  const auto block = [&](int b) { return ((b % machines) + machines) % machines; };
  const auto length = [&](int b) { return first[b + 1] - first[b]; };
  const MPI_Datatype type = mpi_type(data);
  const int64_t elem = data.element_size();
  char* base = static_cast<char*>(data.data_ptr());
  int64_t longest = 0;
  for (int b = 0; b < machines; ++b) longest = std::max(longest, length(b));
  block_.resize(static_cast<size_t>(longest * elem));
  const kernels::ReduceKind kind = op == ReduceOp::Max ? kernels::ReduceKind::Max : kernels::ReduceKind::Sum;
  // Step s: block me-s-1 (this leader's partial sum of it) goes right, block me-s-2 comes from the
  // left and is added here; after machines-1 steps block me has passed every leader.
  for (int s = 0; s + 1 < machines; ++s) {
    const int out = block(me - s - 1), in = block(me - s - 2);
    XLAUNCH_CHECK_MPI(MPI_Sendrecv(base + first[out] * elem, static_cast<int>(length(out)), type, right, 0,
                                   block_.data(), static_cast<int>(length(in)), type, left, 0, leaders_->mpi_comm(),
                                   MPI_STATUS_IGNORE));
    char* mine = base + first[in] * elem;
    if (type == MPI_FLOAT) {
      const float* srcs[2] = {reinterpret_cast<const float*>(mine), reinterpret_cast<const float*>(block_.data())};
      kernels::reduce_into_float(srcs, 2, reinterpret_cast<float*>(mine), length(in), kind);
    } else {
      const double* srcs[2] = {reinterpret_cast<const double*>(mine), reinterpret_cast<const double*>(block_.data())};
      kernels::reduce_into_double(srcs, 2, reinterpret_cast<double*>(mine), length(in), kind);
    }
  }
}

void HierarchicalCommunicator::ring_allgather(at::Tensor& data, const std::vector<int64_t>& first) {
  const int machines = leaders_->size(), me = leaders_->rank();
  const int right = (me + 1) % machines, left = (me + machines - 1) % machines;
  const auto block = [&](int b) { return ((b % machines) + machines) % machines; };
  const int64_t elem = data.element_size();
  char* base = static_cast<char*>(data.data_ptr());
  // Step s: block me-s (this leader's own at first, then the one just received) goes right, block
  // me-s-1 comes from the left. Bytes, so any dtype travels.
  for (int s = 0; s + 1 < machines; ++s) {
    const int out = block(me - s), in = block(me - s - 1);
    XLAUNCH_CHECK_MPI(MPI_Sendrecv(base + first[out] * elem, static_cast<int>((first[out + 1] - first[out]) * elem),
                                   MPI_BYTE, right, 1, base + first[in] * elem,
                                   static_cast<int>((first[in + 1] - first[in]) * elem), MPI_BYTE, left, 1,
                                   leaders_->mpi_comm(), MPI_STATUS_IGNORE));
  }
}

std::shared_ptr<Communicator> HierarchicalCommunicator::machine_group() {
  return std::make_shared<MachineShardGroup>(shared_from_this());
}

MachineShardGroup::MachineShardGroup(std::shared_ptr<HierarchicalCommunicator> hier) : hier_(std::move(hier)) {
  for (int r = 0; r < hier_->local_->size(); ++r) order_.push_back(r);
}

std::shared_ptr<Work> MachineShardGroup::reduce_scatter_async(at::Tensor in, at::Tensor out, ReduceOp op) {
  check_reduce_scatter_args(*this, in, out);
  check_cpu_collective_tensor(in, "reduce_scatter");
  check_cpu_collective_tensor(out, "reduce_scatter");
  op = reduce_op_for(in.scalar_type(), op, "reduce_scatter");
  const CollectiveInfo info = CollectiveInfo::of("reduce_scatter", in);
  // The item holds the tensors, whose memory stays put until every rank has read it, and not this
  // group, which may go first; nor a reference to the hierarchical communicator, whose last one
  // must not be dropped on its own thread: its destructor waits for the items queued there.
  HierarchicalCommunicator* h = hier_.get();
  return hier_->world_->comm_thread().enqueue(
      info, [h, order = order_, in = std::move(in), out = std::move(out), op]() mutable {
        if (out.numel() == 0) return;
        const int local = h->local_->size(), me = h->local_->rank();
        // Sums first (Max stays Max), so that Avg divides once, by the job's size.
        const ReduceOp sum = op == ReduceOp::Max ? ReduceOp::Max : ReduceOp::Sum;
        if (local == 1) out.copy_(in);
        else if (h->shm_->holds(in))
          h->shm_->reduce_scatter_through_staging(in, out, sum, local, order, me,
                                                  [](at::Tensor&, int64_t) {});  // this machine only
        else h->local_->run_reduce_scatter(in, out, sum);
        if (h->replicas_->size() > 1) h->replicas_->run_allreduce(out, sum);
        if (op == ReduceOp::Avg) out.div_(static_cast<double>(h->size()));
      });
}

std::shared_ptr<Work> MachineShardGroup::allgather_async(at::Tensor in, at::Tensor out) {
  check_cpu_collective_tensor(in, "allgather");
  check_cpu_collective_tensor(out, "allgather");
  if (out.numel() != in.numel() * size() || out.scalar_type() != in.scalar_type())
    throw UsageError("allgather: the output must hold size() * input elements of the input's dtype");
  if (size() == 1 || in.numel() == 0 || !(hier_->shm_->holds(in) || hier_->shm_->holds(out)))
    return hier_->local_->allgather_async(std::move(in), std::move(out));
  const CollectiveInfo info = CollectiveInfo::of("allgather", in);
  HierarchicalCommunicator* h = hier_.get();  // as in reduce_scatter_async
  return hier_->world_->comm_thread().enqueue(info, [h, order = order_, in = std::move(in), out = std::move(out)] {
    h->shm_->allgather_through_staging(in, out, order, h->local_->rank(), [](at::Tensor&, int64_t) {});
  });
}

}  // namespace xlaunch
