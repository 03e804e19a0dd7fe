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

std::string auto_cpu_allreduce(const MachineLayout& layout) {
  if (layout.leader.size() < 2) return "mpi";
  if (layout.machines == 1) return "shm";
  // One rank per machine has nothing to share; uneven machines would log different collectives on
  // their machine communicators (one of a single rank logs none).
  if (layout.ranks_per_machine > 1) return "hier";
  return "mpi";
}

HierarchicalCommunicator::HierarchicalCommunicator(std::shared_ptr<MpiCommunicator> world, const MachineLayout& layout)
    : world_(std::move(world)) {
  const int me = world_->rank();
  if (static_cast<int>(layout.leader.size()) != world_->size())
    throw UsageError("HierarchicalCommunicator: the layout has " + std::to_string(layout.leader.size()) +
                     " ranks, the world " + std::to_string(world_->size()));
  local_ = world_->split(layout.leader[me], me);
  leaders_ = world_->split(local_->rank() == 0 ? 0 : MPI_UNDEFINED, me);
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
  MPI_Comm comm = leaders_->mpi_comm();
  const MPI_Datatype type = staged.scalar_type() == at::kFloat ? MPI_FLOAT : MPI_DOUBLE;
  const MPI_Op mop = op == ReduceOp::Max ? MPI_MAX : MPI_SUM;
  const int64_t n = staged.numel(), elem = staged.element_size();
  char* data = static_cast<char*>(staged.data_ptr());
  // n fits an int: the staging buffer is at most 256 MiB.
  if (n * elem < kReduceScatterBytes || n < machines) {
    XLAUNCH_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), type, mop, comm));
    return;
  }
  // A ring over the leaders, in blocks of n / machines: a reduce-scatter (after machines-1 steps
  // leader i holds block i+1 reduced over every machine), then an allgather of the reduced blocks.
  // Each step sends one block to the right while receiving one from the left (MPI_Sendrecv), so
  // each link carries every block once each way per phase. (Open MPI's MPI_Reduce_scatter between
  // 2 leaders over TCP ran at about 70% of this on the simulated 1 Gbit/s link.)
  std::vector<int64_t> first(machines + 1);
  for (int i = 0; i <= machines; ++i) first[i] = n * i / machines;
  const auto block = [&](int b) { return ((b % machines) + machines) % machines; };
  const int me = leaders_->rank(), right = (me + 1) % machines, left = (me + machines - 1) % machines;
  block_.resize(static_cast<size_t>((first[1] + 1) * elem));
  const kernels::ReduceKind kind = op == ReduceOp::Max ? kernels::ReduceKind::Max : kernels::ReduceKind::Sum;
  for (int s = 0; s + 1 < machines; ++s) {
    const int out = block(me - s), in = block(me - s - 1);
    const int64_t out_n = first[out + 1] - first[out], in_n = first[in + 1] - first[in];
    XLAUNCH_CHECK_MPI(MPI_Sendrecv(data + first[out] * elem, static_cast<int>(out_n), type, right, 0, block_.data(),
                                   static_cast<int>(in_n), type, left, 0, comm, MPI_STATUS_IGNORE));
    char* mine = data + first[in] * elem;
    if (type == MPI_FLOAT) {
      const float* srcs[2] = {reinterpret_cast<const float*>(mine), reinterpret_cast<const float*>(block_.data())};
      kernels::reduce_into_float(srcs, 2, reinterpret_cast<float*>(mine), in_n, kind);
    } else {
      const double* srcs[2] = {reinterpret_cast<const double*>(mine), reinterpret_cast<const double*>(block_.data())};
      kernels::reduce_into_double(srcs, 2, reinterpret_cast<double*>(mine), in_n, kind);
    }
  }
  for (int s = 0; s + 1 < machines; ++s) {
    const int out = block(me + 1 - s), in = block(me - s);
    XLAUNCH_CHECK_MPI(MPI_Sendrecv(data + first[out] * elem, static_cast<int>(first[out + 1] - first[out]), type, right,
                                   1, data + first[in] * elem, static_cast<int>(first[in + 1] - first[in]), type, left,
                                   1, comm, MPI_STATUS_IGNORE));
  }
}

}  // namespace xlaunch
