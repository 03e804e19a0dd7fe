// Under mpirun -np 3: a streamed dataset of 10,007 generated records through prepared loaders (2
// workers, 2 parts per rank) is read exactly once per pass over the ranks, each rank's batches are
// those one process reading the same 6 parts hands over (batch 3s + r of it is rank r's batch s),
// a save_state / load_state in the middle of a pass resumes exactly, and ranks whose streams end
// at different batches fail together instead of hanging.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "../runtime/ddp_mpi_helpers.h"
#include "comm/agree.h"
#include "scratch_dir.h"
#include "stream_datasets.h"
#include "xlaunch/accelerator.h"

namespace {

using xlaunch::Loader;
using xlaunch::test::batch_targets;
using xlaunch::test::Records;
using xlaunch::test::stream_options;
using Batches = std::vector<std::vector<int64_t>>;

constexpr int64_t kRecords = 10007;

std::string text_of(const Batches& batches) {
  std::ostringstream os;
  for (const auto& b : batches) {
    for (const int64_t id : b) os << id << " ";
    os << "\n";
  }
  return os.str();
}

Batches batches_of(const std::string& text) {
  Batches out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream ids(line);
    out.emplace_back();
    for (int64_t id; ids >> id;) out.back().push_back(id);
  }
  return out;
}

std::vector<int64_t> ids_of(const xlaunch::Batch& b) {
  const at::Tensor t = b.target.contiguous();
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

// Every record once over all ranks' batches (gathered from every rank).
void expect_once_each(xlaunch::Communicator& comm, const Batches& mine, const std::string& what) {
  std::map<int64_t, int> seen;
  for (const std::string& text : comm.allgather_strings(text_of(mine)))
    for (const auto& b : batches_of(text))
      for (const int64_t id : b) ++seen[id];
  int64_t wrong = 0;
  for (int64_t i = 0; i < kRecords; ++i) wrong += seen[i] != 1;
  EXPECT_EQ(wrong, 0) << what << ": records not seen exactly once";
  EXPECT_EQ(static_cast<int64_t>(seen.size()), kRecords) << what;
}

TEST(StreamMpi, EveryRecordOncePerPassAndAnExactResume) {
  xlaunch::Accelerator acc(xlaunch::test::cpu_options());
  auto comm = acc.communicator(at::Device(at::kCPU));
  ASSERT_EQ(acc.num_processes(), 3);
  const int rank = acc.process_index();
  auto ds = std::make_shared<Records>(kRecords);
  Loader& loader = acc.prepare(Loader(ds, stream_options(16, 2, 2)));

  // One process reading the same 6 parts: its batch 3s + r is rank r's batch s (the parts all end
  // in the same round here, 105 batches each).
  Loader single(ds, stream_options(16, 2, 6));
  const Batches one = batch_targets(single);

  const Batches epoch0 = batch_targets(loader);
  expect_once_each(*comm, epoch0, "epoch 0");
  ASSERT_EQ(epoch0.size(), 210u);
  for (size_t s = 0; s < epoch0.size(); ++s) ASSERT_EQ(epoch0[s], one[3 * s + rank]) << "batch " << s;

  // Epoch 1: 37 batches, save, the rest (what the uninterrupted run reads), back to the save.
  std::string dir = rank == 0 ? xlaunch::test::make_scratch_dir("StreamMpi") : "";
  dir = xlaunch::broadcast_string(*comm, dir);
  Batches before, rest;
  for (auto& b : loader) {  // saved in the body of batch 36, as a training loop does after its step
    if (before.size() == 37) {
      rest.push_back(ids_of(b));
      continue;
    }
    before.push_back(ids_of(b));
    if (before.size() == 37) acc.save_state(dir + "/ckpt");
  }
  EXPECT_EQ(loader.epoch(), 2);
  acc.load_state(dir + "/ckpt");
  EXPECT_EQ(loader.position().epoch, 1);
  EXPECT_EQ(loader.position().batch, 37);
  const Batches resumed = batch_targets(loader);
  EXPECT_EQ(resumed, rest) << "rank " << rank << ": the resumed pass differs from the uninterrupted one";
  Batches whole = before;
  whole.insert(whole.end(), resumed.begin(), resumed.end());
  expect_once_each(*comm, whole, "epoch 1 across the resume");
  if (rank == 0 && !HasFailure()) xlaunch::test::remove_scratch_dir(dir);
}

TEST(StreamMpi, RanksWhoseStreamsEndApartFailTogether) {
  xlaunch::Accelerator acc(xlaunch::test::cpu_options());
  auto comm = acc.communicator(at::Device(at::kCPU));
  // Rank r reads parts r and r + 3; rank 2's have 4 and 8 records, the others' 8 and 8 (batch 4).
  auto ds = std::make_shared<Records>(1000, -1, std::vector<int64_t>{8, 8, 4, 8, 8, 8});
  Loader& loader = acc.prepare(Loader(ds, stream_options(4, 2, 2)));
  std::string error;
  int64_t handed = 0;
  try {
    for (auto it = loader.begin(); it != loader.end(); ++it) ++handed;
  } catch (const xlaunch::UsageError& e) {
    error = e.what();
  }
  EXPECT_EQ(handed, 3);
  EXPECT_NE(error.find("after 3 batches, rank(s) 2 have no batch left while rank(s) 0,1 still have"), std::string::npos)
      << error;
  const auto errors = comm->allgather_strings(error);
  for (const auto& e : errors) EXPECT_EQ(e, error);
}

}  // namespace
