// The flight recorder (xlaunch/status/flight_recorder.h): the "last collectives:" table and the
// finding (a desync, a straggler) from literal boards, boards read back from a status directory,
// the saved JSON read back, and `xlaunch debug` (observe/flight_report.h) on both.
#include "xlaunch/status/flight_recorder.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "observe/flight_report.h"
#include "scratch_dir.h"
#include "xlaunch/status/private_files.h"
#include "xlaunch/status/status_dir.h"

using namespace xlaunch::status;

namespace {

constexpr int64_t kS = 1000000000;
constexpr int64_t kNow = 1000 * kS;

// Rank r's board after `done` finished allreduces (#0..#done-1, 1 s apart, 2 ms each, bucket 0, 1 MiB
// float32) and then `open` (op, numel), issued 5 s before now and running, when open_op is given.
std::unique_ptr<Board> board(int rank, int world, uint64_t done, const char* open_op = nullptr, int64_t numel = 262144,
                             const char* dtype = "float32") {
  auto b = std::make_unique<Board>();
  b->rank = rank;
  b->world = world;
  b->pid = 100 + rank;
  std::snprintf(b->host, sizeof b->host, "node%d", rank / 2);
  for (auto& r : b->ring) r.seq.store(~uint64_t{0});
  for (uint64_t s = 0; s < done; ++s) {
    const int64_t t = kNow - 20 * kS + static_cast<int64_t>(s) * kS / 100;
    b->log_issued(s, "allreduce", "float32", 262144, 4, 0, t);
    b->log_started(s, t);
    b->log_finished(s, true, t + 2000000);
  }
  uint64_t issued = done;
  if (open_op) {
    b->log_issued(done, open_op, dtype, numel, std::string(dtype) == "int64" ? 8 : 4, -1, kNow - 5 * kS);
    b->log_started(done, kNow - 5 * kS);
    issued = done + 1;
  }
  b->issued.store(issued);
  b->completed.store(done);
  b->phase.store(static_cast<int32_t>(Phase::Forward));
  b->alive_ns.store(kNow - 3 * kS);
  return b;
}

std::vector<RankFlight> flights(const std::vector<std::unique_ptr<Board>>& boards) {
  std::vector<RankFlight> out;
  for (const auto& b : boards) out.push_back(snapshot(*b));
  return out;
}

}  // namespace

TEST(FlightRecorder, ADesyncNamesTheRankOnAnotherPath) {
  std::vector<std::unique_ptr<Board>> b;
  for (int r = 0; r < 4; ++r) b.push_back(r == 2 ? board(r, 4, 341, "broadcast", 10, "int64") : board(r, 4, 341, "allreduce"));
  const auto f = flights(b);
  EXPECT_EQ(flight_finding(f, kNow),
            "rank 2 is in broadcast #341 while ranks 0, 1, 3 are in allreduce #341: the training loop took another "
            "path on rank 2");
  const std::string table = flight_table(f, kNow);
  EXPECT_EQ(table.rfind("last collectives:\n", 0), 0u) << table;
  EXPECT_NE(table.find("  2     341      broadcast      80 B int64"), std::string::npos) << table;
  EXPECT_NE(table.find("  0     341      allreduce      1.0 MiB float32"), std::string::npos) << table;
  EXPECT_NE(table.find("running for 5.0 s"), std::string::npos) << table;
  EXPECT_NE(table.find("  1     340      allreduce      1.0 MiB float32 bucket 0     done in 2.0 ms"), std::string::npos)
      << table;
}

TEST(FlightRecorder, TheSameOpOfAnotherSizeIsADesyncToo) {
  std::vector<std::unique_ptr<Board>> b;
  b.push_back(board(0, 2, 7, "allreduce", 100));
  b.push_back(board(1, 2, 7, "allreduce", 200));
  EXPECT_EQ(flight_finding(flights(b), kNow),
            "rank 1 is in allreduce #7 of 800 B float32 while rank 0 is in allreduce #7 of 400 B float32: the ranks' "
            "training loops took different paths");
}

TEST(FlightRecorder, AStragglerIsNamedWithWhereItWas) {
  std::vector<std::unique_ptr<Board>> b;
  for (int r = 0; r < 4; ++r) b.push_back(r == 3 ? board(r, 4, 512) : board(r, 4, 512, "allreduce"));
  const auto f = flights(b);
  const std::string finding = flight_finding(f, kNow);
  EXPECT_EQ(finding.rfind("every rank but 3 entered allreduce #512; rank 3 last finished #511 ", 0), 0u) << finding;
  EXPECT_NE(finding.find(" s ago and is in forward"), std::string::npos) << finding;
  EXPECT_NE(flight_table(f, kNow).find("  3     -        not in #512: last finished #511"), std::string::npos);
  // A rank that exited says so instead.
  b[3]->life.store(static_cast<int32_t>(Life::Exited));
  b[3]->exit_status.store(3);
  EXPECT_NE(flight_finding(flights(b), kNow).find("rank 3 last finished #511 14.9 s ago and exited with code 3"),
            std::string::npos);
}

TEST(FlightRecorder, NothingToSayWhenEveryRankIsInTheSameCollectiveOrNoneIssuedOne) {
  std::vector<std::unique_ptr<Board>> b;
  for (int r = 0; r < 2; ++r) b.push_back(board(r, 2, 30, "allreduce"));
  EXPECT_EQ(flight_finding(flights(b), kNow), "");
  std::vector<std::unique_ptr<Board>> idle;
  for (int r = 0; r < 2; ++r) idle.push_back(board(r, 2, 0));
  EXPECT_EQ(flight_table(flights(idle), kNow), "");
  EXPECT_EQ(flight_finding(flights(idle), kNow), "");
}

TEST(FlightRecorder, ARankWithoutAVisibleBoardHasARowSayingSo) {
  std::vector<std::unique_ptr<Board>> b;
  b.push_back(board(0, 2, 5, "allreduce"));
  auto f = flights(b);
  RankFlight unseen;
  unseen.rank = 1;
  f.push_back(unseen);
  EXPECT_NE(flight_table(f, kNow).find("  1     -        no progress board visible from this machine"), std::string::npos);
  EXPECT_EQ(flight_finding(f, kNow), "");  // one rank seen: nothing to compare
}

TEST(FlightRecorder, TheSavedDocumentReadsBackTheSame) {
  std::vector<std::unique_ptr<Board>> b;
  for (int r = 0; r < 3; ++r) b.push_back(r == 1 ? board(r, 3, 40) : board(r, 3, 40, "allgather"));
  const auto f = flights(b);
  const auto back = parse_flight_json(flight_json(f, kNow));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->second, kNow);
  EXPECT_EQ(flight_table(back->first, kNow), flight_table(f, kNow));
  EXPECT_EQ(flight_finding(back->first, kNow), flight_finding(f, kNow));
  EXPECT_FALSE(parse_flight_json("{\"ranks\": [{\"rank\": 0}]}"));
  EXPECT_FALSE(parse_flight_json("not json"));
}

TEST(FlightRecorder, BoardsOfAStatusDirectoryAndXlaunchDebug) {
  const xlaunch::test::ScratchDir scratch;
  std::string why;
  const std::string dir = xlaunch::files::make_private_dir(scratch.path, "xlaunch-status-R-0-", &why);
  ASSERT_FALSE(dir.empty()) << why;
  for (int r = 0; r < 2; ++r) {  // each rank's board, as the ranks write them
    void* p = xlaunch::files::map_new_file(progress_board_path(dir, r), sizeof(Board), &why);
    ASSERT_NE(p, nullptr) << why;
    const auto lit = r == 0 ? board(0, 2, 9, "allreduce") : board(1, 2, 9);
    auto* b = new (p) Board{};
    b->rank = lit->rank;
    b->world = lit->world;
    b->issued.store(lit->issued.load());
    b->phase.store(lit->phase.load());
    for (uint64_t s = 0; s < lit->issued.load(); ++s) {
      const CollectiveRecord& c = *lit->find(s);
      b->log_issued(s, c.op, c.dtype, c.numel, c.elem_bytes, c.bucket, c.issued_ns.load());
      b->log_started(s, c.start_ns.load());
      if (c.state_of(s) == CollState::Done) b->log_finished(s, true, c.end_ns.load());
    }
    for (uint64_t s = lit->issued.load(); s < kRing; ++s) b->ring[s].seq.store(~uint64_t{0});
    b->magic = kBoardMagic;
  }
  EXPECT_EQ(flight_world(dir), 2);
  const auto f = read_flight(dir, 2);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_TRUE(f[0].seen && f[1].seen);
  EXPECT_EQ(f[0].entries.size(), 10u);
  EXPECT_NE(flight_finding(f, kNow).find("every rank but 1 entered allreduce #9"), std::string::npos);

  // What a failed attempt saves in its log_dir, and `xlaunch debug` on the directory and on the file.
  const std::string log_dir = scratch.path + "/logs";
  ASSERT_TRUE(xlaunch::files::make_dirs(log_dir, &why)) << why;
  const std::string out_path = scratch.path + "/out.txt";
  FILE* out = std::fopen(out_path.c_str(), "w");
  xlaunch::launcher::report_flight(out, dir, 2, log_dir, "RUN", 0);
  EXPECT_EQ(xlaunch::launcher::print_flight(out, dir), 0);      // the live boards
  EXPECT_EQ(xlaunch::launcher::print_flight(out, log_dir), 0);  // the saved file
  std::fclose(out);
  std::ifstream saved(log_dir + "/" + xlaunch::launcher::flight_file_name("RUN", 0));
  EXPECT_TRUE(saved.good()) << "no flight-recorder-RUN-0.json in " << log_dir;
  std::ifstream in(out_path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t tables = 0;
  for (size_t at = 0; (at = text.find("last collectives:\n", at)) != std::string::npos; ++at) ++tables;
  EXPECT_EQ(tables, 3u) << text;
  EXPECT_NE(text.find("flight recorder saved: " + log_dir + "/flight-recorder-RUN-0.json"), std::string::npos) << text;
  EXPECT_EQ(xlaunch::launcher::print_flight(stderr, scratch.path), 2);  // neither boards nor a saved file
  xlaunch::files::remove_private_dir(dir);
}
