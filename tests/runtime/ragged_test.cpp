// Ragged collectives with ranks as threads (InProcessCommunicator): gather of different row
// counts, pad_across_processes, gather_object / broadcast_object, split_between_processes; and
// their pure parts with literal expectations. Every multi-rank result is compared with what one
// process computes from (rank, index).
#include <gtest/gtest.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "comm/ragged.h"
#include "inprocess_ranks.h"
#include "xlaunch/accelerator.h"
#include "xlaunch/error.h"

namespace {

using xlaunch::Accelerator;
using xlaunch::AcceleratorOptions;
using xlaunch::InProcessCommunicator;
using xlaunch::RankShape;
using xlaunch::test::run_ranks;

AcceleratorOptions cpu_options() {
  AcceleratorOptions o;
  o.cpu = true;
  o.num_threads = 1;
  return o;
}

// Rank r's rows: row i, column c holds r * 1000 + i * 10 + c (integer-valued floats).
at::Tensor rows_of(int rank, int64_t n, int64_t cols = 3) {
  return (at::arange(n, at::kFloat).unsqueeze(1) * 10 + at::arange(cols, at::kFloat).unsqueeze(0)) + rank * 1000.0;
}

// Runs fn on `world` ranks, each with its Accelerator; returns each rank's error ("" when none).
std::vector<std::string> errors_on_ranks(int world, const std::function<void(Accelerator&)>& fn) {
  std::vector<std::string> errors(world);
  run_ranks(world, [&](std::shared_ptr<InProcessCommunicator> c) {
    Accelerator acc(cpu_options(), c);
    try {
      fn(acc);
    } catch (const xlaunch::UsageError& e) {
      errors[c->rank()] = e.what();
    }
  });
  return errors;
}

// --- split_between_processes: the pure split, literal -------------------------------------------

using Idx = std::vector<int64_t>;

TEST(Split, ContiguousChunksTheFirstRanksTakeOneMore) {
  EXPECT_EQ(xlaunch::split_indices(5, 0, 3, false), (Idx{0, 1}));
  EXPECT_EQ(xlaunch::split_indices(5, 1, 3, false), (Idx{2, 3}));
  EXPECT_EQ(xlaunch::split_indices(5, 2, 3, false), (Idx{4}));
  EXPECT_EQ(xlaunch::split_indices(5, 0, 2, false), (Idx{0, 1, 2}));
  EXPECT_EQ(xlaunch::split_indices(5, 1, 2, false), (Idx{3, 4}));
  EXPECT_EQ(xlaunch::split_indices(6, 2, 3, false), (Idx{4, 5}));
  EXPECT_EQ(xlaunch::split_indices(2, 2, 3, false), (Idx{}));  // fewer items than ranks
  EXPECT_EQ(xlaunch::split_indices(0, 0, 2, false), (Idx{}));
}

TEST(Split, PaddingRepeatsTheLastItemToCeilNOverWorld) {
  EXPECT_EQ(xlaunch::split_indices(5, 0, 3, true), (Idx{0, 1}));
  EXPECT_EQ(xlaunch::split_indices(5, 1, 3, true), (Idx{2, 3}));
  EXPECT_EQ(xlaunch::split_indices(5, 2, 3, true), (Idx{4, 4}));
  EXPECT_EQ(xlaunch::split_indices(5, 1, 2, true), (Idx{3, 4, 4}));
  EXPECT_EQ(xlaunch::split_indices(7, 2, 3, true), (Idx{5, 6, 6}));
  EXPECT_EQ(xlaunch::split_indices(6, 2, 3, true), (Idx{4, 5}));  // divides: nothing added
  EXPECT_EQ(xlaunch::split_indices(2, 2, 3, true), (Idx{1}));     // an empty share repeats the list's last
  EXPECT_EQ(xlaunch::split_indices(0, 1, 3, true), (Idx{}));
  EXPECT_THROW(xlaunch::split_indices(5, 3, 3, false), xlaunch::UsageError);
}

TEST(Split, AcceleratorSplitsAListOnTwoAndThreeRanks) {
  const std::vector<std::string> items{"a", "b", "c", "d", "e"};
  using S = std::vector<std::string>;
  const std::map<int, std::vector<S>> want{{2, {{"a", "b", "c"}, {"d", "e"}}}, {3, {{"a", "b"}, {"c", "d"}, {"e"}}}};
  const std::map<int, std::vector<S>> padded{{2, {{"a", "b", "c"}, {"d", "e", "e"}}},
                                             {3, {{"a", "b"}, {"c", "d"}, {"e", "e"}}}};
  for (int world : {2, 3}) {
    std::vector<S> got(world), got_padded(world);
    run_ranks(world, [&](std::shared_ptr<InProcessCommunicator> c) {
      Accelerator acc(cpu_options(), c);
      got[c->rank()] = acc.split_between_processes(items);
      got_padded[c->rank()] = acc.split_between_processes(items, /*apply_padding=*/true);
    });
    EXPECT_EQ(got, want.at(world)) << world << " ranks";
    EXPECT_EQ(got_padded, padded.at(world)) << world << " ranks";
    // Without padding, the shares together are the list, once, in order.
    S joined;
    for (const auto& s : got) joined.insert(joined.end(), s.begin(), s.end());
    EXPECT_EQ(joined, items);
  }
}

// --- the shape check and the padding, pure --------------------------------------------------------

RankShape shape(std::vector<int64_t> sizes, at::ScalarType dtype = at::kFloat) {
  RankShape s;
  s.sizes = std::move(sizes);
  s.dtype = dtype;
  return s;
}

TEST(RaggedPure, ShapeProblemNamesWhatDiffersAndEveryRanksShape) {
  EXPECT_EQ(xlaunch::shape_problem({shape({0, 3}), shape({5, 3}), shape({17, 3})}, {}), "");
  EXPECT_EQ(xlaunch::shape_problem({shape({5, 3}), shape({5, 4}), shape({17, 3})}, {}),
            "they differ in dim 1: rank 0 has [5, 3] Float on cpu; rank 1 has [5, 4] Float on cpu; "
            "rank 2 has [17, 3] Float on cpu");
  EXPECT_EQ(xlaunch::shape_problem({shape({2, 3}), shape({2, 3}, at::kLong), shape({2, 3})}, {}),
            "they have different dtypes: ranks 0 and 2 have [2, 3] Float on cpu; rank 1 has [2, 3] Long on cpu");
  EXPECT_EQ(xlaunch::shape_problem({shape({2}), shape({2, 1})}, {}),
            "they have different numbers of dims: rank 0 has [2] Float on cpu; rank 1 has [2, 1] Float on cpu");
  EXPECT_EQ(xlaunch::shape_problem({shape({}), shape({})}, {}),
            "dim 0 does not exist in tensors of 0 dims: ranks 0 and 1 have [] Float on cpu");
  // pad_across_processes: only the number of dims matters.
  const xlaunch::ShapeRule pad{1, true, false};
  EXPECT_EQ(xlaunch::shape_problem({shape({2, 3}), shape({4, 7}, at::kLong)}, pad), "");
  EXPECT_EQ(xlaunch::shape_problem({shape({2, 3}), shape({4, 7})}, xlaunch::ShapeRule{2, true, false}),
            "dim 2 does not exist in tensors of 2 dims: rank 0 has [2, 3] Float on cpu; rank 1 has [4, 7] Float on cpu");
  RankShape undefined;
  undefined.defined = false;
  EXPECT_EQ(xlaunch::shape_problem({shape({2}), undefined}, {}),
            "rank 1 passed an undefined tensor: rank 0 has [2] Float on cpu; rank 1 has an undefined tensor");
  RankShape on_gpu = shape({2});
  on_gpu.device = c10::DeviceType::CUDA;
  EXPECT_EQ(xlaunch::shape_problem({shape({2}), on_gpu}, {}),
            "they are on different kinds of device: rank 0 has [2] Float on cpu; rank 1 has [2] Float on cuda");
}

TEST(RaggedPure, PadDimAtTheEndOrTheStart) {
  const at::Tensor t = at::tensor({1, 2, 3, 4}, at::kLong).reshape({2, 2});
  EXPECT_TRUE(xlaunch::pad_dim(t, 1, 4, -1, false).equal(at::tensor({1, 2, -1, -1, 3, 4, -1, -1}, at::kLong).reshape({2, 4})));
  EXPECT_TRUE(xlaunch::pad_dim(t, 1, 3, 9, true).equal(at::tensor({9, 1, 2, 9, 3, 4}, at::kLong).reshape({2, 3})));
  EXPECT_TRUE(xlaunch::pad_dim(t, 0, 3, 0, false).equal(at::tensor({1, 2, 3, 4, 0, 0}, at::kLong).reshape({3, 2})));
  EXPECT_TRUE(xlaunch::pad_dim(t, 0, 2, 7, false).is_same(t));  // already that size: t itself
}

TEST(RaggedPure, ConcatRowsCutsEveryRanksPadding) {
  // 3 ranks padded to 3 rows: rank 0 had 1, rank 1 had 0, rank 2 had 3.
  const at::Tensor gathered = at::arange(9, at::kLong).reshape({3, 3});
  EXPECT_TRUE(xlaunch::concat_rows(gathered, {1, 0, 3}).equal(at::tensor({0, 6, 7, 8}, at::kLong)));
  EXPECT_EQ(xlaunch::concat_rows(gathered, {0, 0, 0}).numel(), 0);
}

// --- Accelerator::gather with ragged dim 0 -------------------------------------------------------

TEST(RaggedGather, SizesZeroFiveAndSeventeenGiveTheTwentyTwoRowsInRankOrder) {
  const std::vector<int64_t> sizes{0, 5, 17};
  // One process: the rows of every rank, in rank order.
  std::vector<at::Tensor> parts;
  for (int r = 0; r < 3; ++r) parts.push_back(rows_of(r, sizes[r]));
  const at::Tensor want = at::cat(parts);
  ASSERT_EQ(want.size(0), 22);
  std::vector<at::Tensor> got(3);
  run_ranks(3, [&](std::shared_ptr<InProcessCommunicator> c) {
    Accelerator acc(cpu_options(), c);
    got[c->rank()] = acc.gather(rows_of(c->rank(), sizes[c->rank()]));
  });
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(got[r].equal(want)) << "rank " << r << ": " << got[r].sizes();
}

TEST(RaggedGather, EqualSizesScalarsAndEveryRankEmpty) {
  run_ranks(3, [&](std::shared_ptr<InProcessCommunicator> c) {
    Accelerator acc(cpu_options(), c);
    const int r = c->rank();
    EXPECT_TRUE(acc.gather(rows_of(r, 2)).equal(at::cat({rows_of(0, 2), rows_of(1, 2), rows_of(2, 2)})));
    EXPECT_TRUE(acc.gather(at::scalar_tensor(r + 1.0, at::kDouble)).equal(at::tensor({1.0, 2.0, 3.0}, at::kDouble)));
    const at::Tensor none = acc.gather(at::zeros({0, 4}, at::kLong));
    EXPECT_EQ(none.sizes(), (std::vector<int64_t>{0, 4}));
  });
}

TEST(RaggedGather, ADifferenceInDimOneIsAnErrorOnEveryRankNamingEachShape) {
  const auto errors = errors_on_ranks(3, [](Accelerator& acc) {
    const int r = acc.process_index();
    acc.gather(at::zeros({r * 5, r == 1 ? 4 : 3}));
  });
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_NE(errors[r].find("gather: the ranks' tensors may differ in dim 0 only, but they differ in dim 1: "
                             "rank 0 has [0, 3] Float on cpu; rank 1 has [5, 4] Float on cpu; "
                             "rank 2 has [10, 3] Float on cpu"),
              std::string::npos)
        << errors[r];
    EXPECT_NE(errors[r].find("acc.pad_across_processes(t, dim)"), std::string::npos) << errors[r];
  }
}

TEST(RaggedGather, ADtypeDifferenceIsAnErrorOnEveryRank) {
  const auto errors = errors_on_ranks(2, [](Accelerator& acc) {
    acc.gather(at::zeros({2}, acc.process_index() == 0 ? at::kFloat : at::kDouble));
  });
  for (const auto& e : errors) EXPECT_NE(e.find("they have different dtypes"), std::string::npos) << e;
}

// --- pad_across_processes --------------------------------------------------------------------------

TEST(PadAcrossProcesses, PadsToTheLargestAtTheEndOrTheStart) {
  // Rank r holds a [2, r + 1] tensor of (r + 1)s; the largest dim 1 is 3.
  std::vector<at::Tensor> end(3), start(3), rows(3);
  run_ranks(3, [&](std::shared_ptr<InProcessCommunicator> c) {
    Accelerator acc(cpu_options(), c);
    const int r = c->rank();
    const at::Tensor t = at::full({2, r + 1}, r + 1, at::kLong);
    end[r] = acc.pad_across_processes(t, 1, -1);
    start[r] = acc.pad_across_processes(t, -1, 0, /*pad_first=*/true);
    rows[r] = acc.pad_across_processes(at::full({r}, 5, at::kLong));  // dim 0, sizes 0, 1, 2
  });
  const auto row = [](std::vector<int64_t> v) { return at::tensor(v, at::kLong).reshape({1, 3}).repeat({2, 1}); };
  EXPECT_TRUE(end[0].equal(row({1, -1, -1})));
  EXPECT_TRUE(end[1].equal(row({2, 2, -1})));
  EXPECT_TRUE(end[2].equal(row({3, 3, 3})));
  EXPECT_TRUE(start[0].equal(row({0, 0, 1})));
  EXPECT_TRUE(start[1].equal(row({0, 2, 2})));
  EXPECT_TRUE(start[2].equal(row({3, 3, 3})));
  EXPECT_TRUE(rows[0].equal(at::tensor({0, 0}, at::kLong)));
  EXPECT_TRUE(rows[1].equal(at::tensor({5, 0}, at::kLong)));
  EXPECT_TRUE(rows[2].equal(at::tensor({5, 5}, at::kLong)));
}

TEST(PadAcrossProcesses, ThenGatherEqualsOneProcessPaddingEverySequence) {
  // Generated sequences of lengths 2, 5, 3: padded to 5 and gathered, as one process would pad them.
  const std::vector<int64_t> len{2, 5, 3};
  std::vector<at::Tensor> want_parts;
  for (int r = 0; r < 3; ++r)
    want_parts.push_back(xlaunch::pad_dim(at::arange(len[r], at::kLong).unsqueeze(0) + 10 * r, 1, 5, -100, false));
  const at::Tensor want = at::cat(want_parts);
  run_ranks(3, [&](std::shared_ptr<InProcessCommunicator> c) {
    Accelerator acc(cpu_options(), c);
    const int r = c->rank();
    const at::Tensor seq = at::arange(len[r], at::kLong).unsqueeze(0) + 10 * r;
    EXPECT_TRUE(acc.gather(acc.pad_across_processes(seq, 1, -100)).equal(want)) << "rank " << r;
  });
}

TEST(PadAcrossProcesses, DifferentNumbersOfDimsOrAMissingDimAreErrorsOnEveryRank) {
  auto errors = errors_on_ranks(2, [](Accelerator& acc) {
    acc.pad_across_processes(acc.process_index() == 0 ? at::zeros({2, 2}) : at::zeros({2}), 1);
  });
  for (const auto& e : errors)
    EXPECT_NE(e.find("pad_across_processes(t, dim 1): every rank's tensor must have the same number of dims, with "
                     "dim 1 among them, but they have different numbers of dims: rank 0 has [2, 2] Float on cpu; "
                     "rank 1 has [2] Float on cpu"),
              std::string::npos)
        << e;
  errors = errors_on_ranks(2, [](Accelerator& acc) { acc.pad_across_processes(at::zeros({2, 2}), 2); });
  for (const auto& e : errors) EXPECT_NE(e.find("dim 2 does not exist in tensors of 2 dims"), std::string::npos) << e;
}

// --- objects --------------------------------------------------------------------------------------

using Metrics = std::map<std::string, std::vector<double>>;

Metrics metrics_of(int r) {
  return {{"loss", {0.5 * r, 1.25}}, {"acc rank " + std::to_string(r), {static_cast<double>(r)}}, {"empty", {}}};
}

TEST(Objects, GatherObjectOfStringsAndMapsRoundTripsInRankOrder) {
  // Strings of different lengths, one empty, with bytes that are not text.
  const std::vector<std::string> strings{"", std::string("a\0b\xff", 4), std::string(1000, 'z')};
  std::vector<std::vector<std::string>> got_strings(3);
  std::vector<std::vector<Metrics>> got_maps(3);
  std::vector<std::vector<std::map<std::string, int64_t>>> got_counts(3);
  run_ranks(3, [&](std::shared_ptr<InProcessCommunicator> c) {
    Accelerator acc(cpu_options(), c);
    const int r = c->rank();
    got_strings[r] = acc.gather_object(strings[r]);
    got_maps[r] = acc.gather_object(metrics_of(r));
    got_counts[r] = acc.gather_object(std::map<std::string, int64_t>{{"seen", 10 + r}, {"max", INT64_MAX - r}});
  });
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(got_strings[r], strings);
    EXPECT_EQ(got_maps[r], (std::vector<Metrics>{metrics_of(0), metrics_of(1), metrics_of(2)}));
    ASSERT_EQ(got_counts[r].size(), 3u);
    EXPECT_EQ(got_counts[r][2].at("seen"), 12);
    EXPECT_EQ(got_counts[r][1].at("max"), INT64_MAX - 1);
  }
}

TEST(Objects, BroadcastObjectHandsEveryRankTheRootsValue) {
  using Nested = std::vector<std::map<std::string, std::vector<std::string>>>;
  const auto value_of = [](int r) { return Nested{{{"from", {std::to_string(r), "x"}}}, {}}; };
  std::vector<Nested> got(3);
  std::vector<bool> flags(3);
  run_ranks(3, [&](std::shared_ptr<InProcessCommunicator> c) {
    Accelerator acc(cpu_options(), c);
    const int r = c->rank();
    got[r] = acc.broadcast_object(value_of(r), 2);
    flags[r] = acc.broadcast_object(r == 0, 0);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(got[r], value_of(2)) << "rank " << r;
    EXPECT_TRUE(flags[r]) << "rank " << r;
  }
}

TEST(Objects, AValueAboveTheLimitIsRefusedOnEveryRankNamingRankSizeAndLimit) {
  AcceleratorOptions o = cpu_options();
  o.max_object_bytes = 100;
  // Rank 1's string encodes to 3 + 1 + 1 + 8 + 200 = 213 bytes.
  std::vector<std::string> gather_errors(3), broadcast_errors(3);
  run_ranks(3, [&](std::shared_ptr<InProcessCommunicator> c) {
    Accelerator acc(o, c);
    const int r = c->rank();
    const std::string mine(r == 1 ? 200 : 10, 'v');
    try {
      acc.gather_object(mine);
    } catch (const xlaunch::UsageError& e) {
      gather_errors[r] = e.what();
    }
    try {
      acc.broadcast_object(mine, 1);
    } catch (const xlaunch::UsageError& e) {
      broadcast_errors[r] = e.what();
    }
    // Still in step after the refusals: a value within the limit goes through.
    EXPECT_EQ(acc.gather_object(r), (std::vector<int>{0, 1, 2}));
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(gather_errors[r],
              "gather_object: a value is larger than the limit of 100 bytes (AcceleratorOptions::max_object_bytes) "
              "once encoded: rank 1's is 213 bytes. Send less per call (split the value over several calls), send "
              "large numeric data as tensors (acc.gather, which takes different row counts), or raise "
              "max_object_bytes");
    EXPECT_NE(broadcast_errors[r].find("broadcast_object: a value is larger than the limit of 100 bytes"),
              std::string::npos)
        << broadcast_errors[r];
    EXPECT_NE(broadcast_errors[r].find("rank 1's is 213 bytes"), std::string::npos) << broadcast_errors[r];
  }
}

}  // namespace
