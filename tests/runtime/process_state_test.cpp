#include <gtest/gtest.h>

#include <map>
#include <string>

#include "xlaunch/error.h"
#include "xlaunch/process_state.h"

namespace {
xlaunch::Place place_of(std::map<std::string, std::string> env) {
  return xlaunch::place_from_env([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}
}  // namespace

TEST(PlaceFromEnv, StartedByHandIsRankZeroOfOne) {
  auto p = place_of({});
  EXPECT_EQ(p.rank, 0);
  EXPECT_EQ(p.world_size, 1);
  EXPECT_EQ(p.local_rank, 0);
}

TEST(PlaceFromEnv, OpenMpi) {
  auto p = place_of({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                     {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(p.rank, 3);
  EXPECT_EQ(p.world_size, 4);
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.local_world_size, 2);
  EXPECT_EQ(p.source, "Open MPI");
}

TEST(PlaceFromEnv, OpenMpiWinsOverTorchrun) {
  auto p = place_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"RANK", "0"}, {"WORLD_SIZE", "8"}});
  EXPECT_EQ(p.world_size, 2);
}

TEST(PlaceFromEnv, PmiSlurmTorchrun) {
  EXPECT_EQ(place_of({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}}).rank, 2);
  auto s = place_of({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}});
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.local_rank, 1);
  auto t = place_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_EQ(t.rank, 1);
  EXPECT_EQ(t.source, "torchrun");
}

TEST(PlaceFromEnv, InconsistentValuesAreUsageErrors) {
  EXPECT_THROW(place_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), xlaunch::UsageError);
  EXPECT_THROW(place_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), xlaunch::UsageError);
  EXPECT_THROW(place_of({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}), xlaunch::UsageError);
  try {
    place_of({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
    FAIL();
  } catch (const xlaunch::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("OMPI_COMM_WORLD_RANK=4 is not below OMPI_COMM_WORLD_SIZE=4"), std::string::npos)
        << e.what();
  }
}
