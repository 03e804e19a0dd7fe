// The operator profile's sums (runtime/src/profile/op_profile.h's aggregate) on literal events,
// each case worked out by hand from torch.profiler's rules (profiler_util.py): self time is the
// duration minus the children's on the same thread; an only child of the same name merges into its
// parent; async events are nobody's parent; kernels are their operator's self CUDA time, or rows of
// their own when no operator launched them; the share
// is of all self CPU (or all kernel) time. op_profile_reference_test compares real profiles with
// torch.profiler itself.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "profile/op_profile.h"

namespace ops = xlaunch::profile::ops;

namespace {

ops::Event ev(const std::string& name, int64_t start, int64_t end, uint64_t thread = 1) {
  ops::Event e;
  e.name = name;
  e.start_ns = start;
  e.end_ns = end;
  e.thread = thread;
  return e;
}

std::map<std::string, xlaunch::status::OpRow> by_name(const ops::Profile& p) {
  std::map<std::string, xlaunch::status::OpRow> out;
  for (const auto& r : p.rows) out[r.name + r.shapes] = r;
  return out;
}

}  // namespace

TEST(OpAggregate, SelfTimeIsTheDurationLessTheChildrensOnTheSameThread) {
  const auto p = ops::aggregate({ev("aten::linear", 0, 100), ev("aten::t", 5, 15), ev("aten::transpose", 6, 12),
                                 ev("aten::as_strided", 7, 9), ev("aten::addmm", 20, 90),
                                 // another thread's event inside the same interval is no child
                                 ev("aten::mm", 30, 40, 2),
                                 // starts inside linear but ends after it: no child either
                                 ev("aten::add_", 95, 110)},
                                false, false);
  const auto rows = by_name(p);
  EXPECT_EQ(rows.at("aten::linear").self_cpu_ns, 100 - 10 - 70);
  EXPECT_EQ(rows.at("aten::linear").cpu_total_ns, 100);
  EXPECT_EQ(rows.at("aten::t").self_cpu_ns, 10 - 6);
  EXPECT_EQ(rows.at("aten::transpose").self_cpu_ns, 6 - 2);
  EXPECT_EQ(rows.at("aten::as_strided").self_cpu_ns, 2);
  EXPECT_EQ(rows.at("aten::addmm").self_cpu_ns, 70);
  EXPECT_EQ(rows.at("aten::mm").self_cpu_ns, 10);
  EXPECT_EQ(rows.at("aten::add_").self_cpu_ns, 15);
  // Every top-level interval once: 100 + 10 + 15.
  EXPECT_EQ(p.self_cpu_total_ns, 125);
  EXPECT_DOUBLE_EQ(rows.at("aten::addmm").share, 70.0 / 125.0);
  // Ranked by self CPU time: addmm, linear, then add_ and mm (15 and 10).
  ASSERT_EQ(p.rows.size(), 7u);
  EXPECT_EQ(p.rows[0].name, "aten::addmm");
  EXPECT_EQ(p.rows[1].name, "aten::linear");
  EXPECT_EQ(p.rows[2].name, "aten::add_");
  EXPECT_EQ(p.rows[3].name, "aten::mm");
}

TEST(OpAggregate, RowsAddUpCallsAndTiesRankByName) {
  const auto p = ops::aggregate({ev("aten::relu", 0, 10), ev("aten::clamp_min", 2, 8), ev("aten::relu", 20, 30),
                                 ev("aten::clamp_min", 21, 29), ev("aten::add_", 40, 52)},
                                false, false);
  ASSERT_EQ(p.rows.size(), 3u);
  EXPECT_EQ(p.rows[0].name, "aten::clamp_min");  // 6 + 8
  EXPECT_EQ(p.rows[0].calls, 2);
  EXPECT_EQ(p.rows[0].self_cpu_ns, 14);
  EXPECT_EQ(p.rows[1].name, "aten::add_");  // 12, before relu's 4 + 2
  EXPECT_EQ(p.rows[2].name, "aten::relu");
  EXPECT_EQ(p.rows[2].calls, 2);
  EXPECT_EQ(p.rows[2].self_cpu_ns, 6);
  EXPECT_EQ(p.rows[2].cpu_total_ns, 20);

  const auto tie = ops::aggregate({ev("b", 0, 5), ev("a", 10, 15)}, false, false);
  EXPECT_EQ(tie.rows[0].name, "a");
  EXPECT_EQ(tie.rows[1].name, "b");
}

TEST(OpAggregate, AnOnlyChildOfTheSameNameMergesIntoItsParent) {
  // add_ inside add_ (a record_function of the operator's own name, say), alone: one call. Two
  // children of the same name stay two calls of their own.
  const auto p = ops::aggregate({ev("aten::add_", 0, 10), ev("aten::add_", 1, 9), ev("aten::fill_", 2, 4),
                                 ev("aten::copy_", 20, 40), ev("aten::copy_", 21, 25), ev("aten::copy_", 26, 30)},
                                false, false);
  const auto rows = by_name(p);
  EXPECT_EQ(rows.at("aten::add_").calls, 1);
  EXPECT_EQ(rows.at("aten::add_").self_cpu_ns, 10 - 2);  // the merged child's child is its own now
  EXPECT_EQ(rows.at("aten::fill_").calls, 1);
  EXPECT_EQ(rows.at("aten::copy_").calls, 3);
  EXPECT_EQ(rows.at("aten::copy_").self_cpu_ns, (20 - 8) + 4 + 4);
  // A chain of three: one call.
  const auto chain = ops::aggregate({ev("x", 0, 10), ev("x", 1, 9), ev("x", 2, 8)}, false, false);
  ASSERT_EQ(chain.rows.size(), 1u);
  EXPECT_EQ(chain.rows[0].calls, 1);
  EXPECT_EQ(chain.rows[0].self_cpu_ns, 10);
}

TEST(OpAggregate, LeftOutNamesAndAsyncEvents) {
  ops::Event async = ev("async_op", 0, 100);
  async.async = true;
  const auto p = ops::aggregate({ev("aten::linear", 0, 100), ev("aten::is_leaf", 10, 20), ev("aten::output_nr", 30, 35),
                                 ev("profiler::_record_function_enter_new", 40, 45), ev("[memory]", 50, 50), async,
                                 ev("aten::t", 60, 70)},
                                false, false);
  const auto rows = by_name(p);
  EXPECT_EQ(rows.count("aten::is_leaf") + rows.count("aten::output_nr") + rows.count("[memory]") +
                rows.count("profiler::_record_function_enter_new"),
            0u);
  EXPECT_EQ(rows.at("aten::linear").self_cpu_ns, 90) << "only t is its child: the left-out events are not";
  EXPECT_EQ(rows.at("async_op").calls, 1);
  EXPECT_EQ(rows.at("async_op").self_cpu_ns, 0);
  EXPECT_EQ(rows.at("async_op").cpu_total_ns, 100);
  EXPECT_EQ(p.self_cpu_total_ns, 100);
}

TEST(OpAggregate, KernelsAreTheirOperatorsSelfCudaTime) {
  ops::Event mm = ev("aten::mm", 300, 350), launch = ev("cudaLaunchKernel", 310, 320, 98765), kernel = ev("gemm", 400, 460),
             other_kernel = ev("elementwise", 470, 500), add = ev("aten::add", 360, 380);
  mm.correlation = 7;
  launch.linked_correlation = 7;  // the runtime call, on the system thread id: put on mm's thread
  kernel.linked_correlation = 7;
  kernel.on_device = true;
  other_kernel.on_device = true;
  other_kernel.linked_correlation = 8;
  add.correlation = 8;
  const auto p = ops::aggregate({mm, launch, kernel, other_kernel, add}, false, true);
  const auto rows = by_name(p);
  EXPECT_EQ(rows.at("aten::mm").self_cpu_ns, 40) << "cudaLaunchKernel is its child";
  EXPECT_EQ(rows.at("aten::mm").self_cuda_ns, 60);
  EXPECT_EQ(rows.at("aten::add").self_cuda_ns, 30);
  EXPECT_EQ(rows.at("cudaLaunchKernel").self_cpu_ns, 10);
  EXPECT_EQ(rows.count("gemm"), 0u) << "a kernel its operator launched is no row of its own";
  EXPECT_EQ(p.device_total_ns, 90);
  EXPECT_DOUBLE_EQ(rows.at("aten::mm").share, 60.0 / 90.0);
  EXPECT_EQ(p.rows[0].name, "aten::mm") << "ranked by self CUDA time on a GPU";
  EXPECT_EQ(p.rows[1].name, "aten::add");
}

TEST(OpAggregate, KernelsNoOperatorLaunchedAreRowsOfTheirOwn) {
  // NCCL's kernels, launched from the communication thread, which the profiler does not follow:
  // they link to no operator event (0, or an id no profiled operator has).
  ops::Event mm = ev("aten::mm", 0, 50), gemm = ev("gemm", 60, 100), ar1 = ev("ncclAllReduce", 100, 300),
             ar2 = ev("ncclAllReduce", 400, 650), bcast = ev("ncclBroadcast", 700, 710);
  mm.correlation = 3;
  gemm.linked_correlation = 3;
  ar2.linked_correlation = 99;
  for (ops::Event* k : {&gemm, &ar1, &ar2, &bcast}) k->on_device = true;
  for (bool by_shapes : {false, true}) {
    const auto p = ops::aggregate({mm, gemm, ar1, ar2, bcast}, by_shapes, true);
    const auto rows = by_name(p);
    ASSERT_EQ(p.rows.size(), 3u) << "aten::mm, ncclAllReduce, ncclBroadcast; gemm is mm's";
    EXPECT_EQ(p.device_total_ns, 40 + 200 + 250 + 10);
    const auto& ar = rows.at("ncclAllReduce");
    EXPECT_EQ(ar.calls, 2);
    EXPECT_EQ(ar.self_cuda_ns, 450);
    EXPECT_EQ(ar.self_cpu_ns, 0);
    EXPECT_EQ(ar.cpu_total_ns, 0);
    EXPECT_EQ(rows.at("aten::mm").self_cuda_ns, 40);
    EXPECT_EQ(rows.at("ncclBroadcast").calls, 1);
    // The biggest GPU cost first, and the shares add up to the whole of the kernel time.
    EXPECT_EQ(p.rows[0].name, "ncclAllReduce");
    EXPECT_DOUBLE_EQ(ar.share, 450.0 / 500.0);
    double shares = 0;
    for (const auto& r : p.rows) shares += r.share;
    EXPECT_DOUBLE_EQ(shares, 1.0);
    EXPECT_EQ(p.self_cpu_total_ns, 50) << "kernels have no CPU time";
    EXPECT_EQ(p.cpu_events.size(), 1u) << "no CPU spans for kernels";
  }
}

TEST(OpAggregate, RecordShapesGroupsByShapes) {
  ops::Event a = ev("aten::addmm", 0, 10), b = ev("aten::addmm", 20, 25), c = ev("aten::addmm", 30, 40);
  a.shapes = c.shapes = "[[10], [64, 784], [784, 10], [], []]";
  b.shapes = "[[256], [64, 784], [784, 256], [], []]";
  const auto grouped = ops::aggregate({a, b, c}, true, false);
  ASSERT_EQ(grouped.rows.size(), 2u);
  EXPECT_EQ(grouped.rows[0].shapes, a.shapes);
  EXPECT_EQ(grouped.rows[0].calls, 2);
  EXPECT_EQ(grouped.rows[1].calls, 1);
  const auto by_name_only = ops::aggregate({a, b, c}, false, false);
  ASSERT_EQ(by_name_only.rows.size(), 1u);
  EXPECT_EQ(by_name_only.rows[0].calls, 3);
  EXPECT_EQ(by_name_only.rows[0].shapes, "");
}
