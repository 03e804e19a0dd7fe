#include "comm/hierarchical_communicator.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "check.h"
#include "comm/threaded_communicator.h"
#include "xlaunch/error.h"

namespace xlaunch {
namespace {

// The first staging buffer, and the most allocate() grows it to: larger lists go in pieces.
constexpr size_t kMinStagingBytes = size_t{1} << 20;
constexpr size_t kMaxStagingBytes = size_t{256} << 20;

// From this size on, the leaders reduce-scatter and allgather (each link carries the piece once in
// each direction, and each leader reduces only its block) instead of MPI_Allreduce.
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

std::shared_ptr<Work> HierarchicalCommunicator::allreduce_coalesced_async(std::vector<at::Tensor> ts, ReduceOp op) {
  for (const auto& t : ts) check_cpu_collective_tensor(t, "allreduce");
  bool shared = !ts.empty();
  for (size_t k = 0; k < ts.size() && shared; ++k)
    shared = ts[k].scalar_type() == ts.front().scalar_type() && shm_->holds(ts[k]);
  if (!shared) return world_->allreduce_coalesced_async(std::move(ts), op);
  // The work holds the tensors, so their memory stays put until every rank has read it.
  const CollectiveInfo info = CollectiveInfo::of("allreduce", ts);
  return world_->comm_thread().enqueue(info, [this, ts = std::move(ts), op] {
    shm_->allreduce_through_staging(ts, op, size(), [this, op](at::Tensor& staged) { across_machines(staged, op); });
  });
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
  // Leader i ends with block i reduced over every machine, then the blocks go to everyone.
  std::vector<int> counts(machines), displs(machines);
  for (int i = 0; i < machines; ++i) {
    displs[i] = static_cast<int>(n * i / machines);
    counts[i] = static_cast<int>(n * (i + 1) / machines) - displs[i];
  }
  const int me = leaders_->rank();
  block_.resize(static_cast<size_t>(counts[me] * elem));
  XLAUNCH_CHECK_MPI(MPI_Reduce_scatter(data, block_.data(), counts.data(), type, mop, comm));
  std::memcpy(data + displs[me] * elem, block_.data(), block_.size());
  XLAUNCH_CHECK_MPI(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts.data(), displs.data(), type, comm));
}

}  // namespace xlaunch
