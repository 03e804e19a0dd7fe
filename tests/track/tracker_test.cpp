// The tracker's writer thread (runtime/src/track/tracker.h) with fake backends that journal their
// calls, block on a promise, or throw: the order of begin/scalars/histogram/flush, log() that never
// waits for a blocked backend, the queue's bound, a failing backend stopped alone, end() that gives
// up on a stuck one, and resume().
#include "track/tracker.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <future>
#include <limits>
#include <mutex>

#include "xlaunch/error.h"

namespace xlaunch::track {
namespace {

using std::chrono::seconds;
constexpr auto kBound = seconds(60);  // how long a test waits for the writer before it fails

// What the fakes saw, shared with the test (a fake belongs to the tracker, and may outlive it on a
// detached thread).
struct Journal {
  std::mutex mu;
  std::vector<std::string> events;
  void add(const std::string& e) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(e);
  }
  // The events but flush (whose number depends on when the queue ran empty).
  std::vector<std::string> records() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::string> out;
    for (const auto& e : events)
      if (e != "flush") out.push_back(e);
    return out;
  }
  std::vector<std::string> all() {
    std::lock_guard<std::mutex> lock(mu);
    return events;
  }
};

class FakeBackend : public Backend {
 public:
  FakeBackend(std::string name, std::shared_ptr<Journal> journal) : name_(std::move(name)), journal_(std::move(journal)) {}
  ~FakeBackend() override {
    if (on_destroy) on_destroy();
  }
  std::string name() const override { return name_; }
  std::string where() const override { return "/fake/" + name_; }
  void begin(const RunStart& s) override {
    journal_->add("begin " + std::to_string(s.first_step) + " " + s.resumed_from);
  }
  void admit(const std::vector<Scalar>& values) override {
    for (const auto& v : values)
      if (v.tag == "refused") throw UsageError("refused is refused");
  }
  void scalars(int64_t step, double, const std::vector<Scalar>& values) override {
    if (on_scalars) on_scalars(step);
    std::string e = "scalars " + std::to_string(step);
    for (const auto& v : values) e += " " + v.tag;
    journal_->add(e);
  }
  void histogram(int64_t step, double, const Histogram& h) override {
    journal_->add("histogram " + std::to_string(step) + " " + h.tag);
  }
  void flush() override {
    if (on_flush) on_flush();
    journal_->add("flush");
  }

  std::function<void(int64_t step)> on_scalars;  // may block or throw
  std::function<void()> on_flush, on_destroy;

 private:
  std::string name_;
  std::shared_ptr<Journal> journal_;
};

// A backend that blocks in scalars() at `step` until released, saying when it got there.
struct Gate {
  std::promise<void> entered, release, destroyed;
  std::shared_future<void> released = release.get_future().share();
  void arm(FakeBackend& b, int64_t at) {
    b.on_scalars = [this, at, r = released](int64_t step) {
      if (step != at) return;
      entered.set_value();
      r.wait_for(kBound);
    };
    b.on_destroy = [this] { destroyed.set_value(); };
  }
};

std::vector<std::unique_ptr<Backend>> one(std::unique_ptr<FakeBackend> b) {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(std::move(b));
  return v;
}

std::vector<Scalar> values(std::initializer_list<std::pair<const char*, double>> kv) {
  std::vector<Scalar> out;
  for (const auto& [t, v] : kv) out.push_back({t, v});
  return out;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Tracker, BeginsBeforeTheFirstRecordAndWritesInOrder) {
  auto j = std::make_shared<Journal>();
  {
    Tracker t(one(std::make_unique<FakeBackend>("a", j)), RunStart{});
    t.log(0, values({{"loss", 1}}));
    t.histogram(1, Histogram{"w"});
    t.log(2, values({{"loss", 2}, {"lr", 3}}));
    t.end();
    EXPECT_EQ(t.counts().records, 3u);
    EXPECT_EQ(t.counts().written, 3u);
  }
  EXPECT_EQ(j->records(), (std::vector<std::string>{"begin 0 ", "scalars 0 loss", "histogram 1 w", "scalars 2 loss lr"}));
  EXPECT_EQ(j->all().back(), "flush");
}

// drain() (before a checkpoint) returns once every record queued before it is written and flushed.
TEST(Tracker, DrainWritesAndFlushesWhatWasQueued) {
  auto j = std::make_shared<Journal>();
  Tracker t(one(std::make_unique<FakeBackend>("a", j)), RunStart{});
  for (int i = 0; i < 200; ++i) t.log(i, values({{"loss", i}}));
  ASSERT_TRUE(t.drain(60));
  EXPECT_EQ(t.counts().written, 200u);
  const auto all = j->all();
  EXPECT_EQ(all.back(), "flush");
  EXPECT_EQ(j->records().back(), "scalars 199 loss");
  t.end();
}

// A drain that cannot finish (a backend stuck) gives up after its bound and says what waits.
TEST(Tracker, DrainGivesUpOnAStuckBackend) {
  auto j = std::make_shared<Journal>();
  auto b = std::make_unique<FakeBackend>("a", j);
  Gate gate;
  gate.arm(*b, 1);
  Tracker t(one(std::move(b)), RunStart{}, Limits{16, 60});
  t.log(0, values({{"loss", 0}}));
  t.log(1, values({{"loss", 1}}));
  t.log(2, values({{"loss", 2}}));
  ASSERT_EQ(gate.entered.get_future().wait_for(kBound), std::future_status::ready);
  testing::internal::CaptureStderr();
  EXPECT_FALSE(t.drain(0.2));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("did not write its queue within 0.2 s (1 records waiting"), std::string::npos) << err;
  gate.release.set_value();
  EXPECT_TRUE(t.drain(60));
  EXPECT_EQ(t.counts().written, 3u);
  t.end();
}

TEST(Tracker, WritesNothingWithoutARecord) {
  auto j = std::make_shared<Journal>();
  { Tracker t(one(std::make_unique<FakeBackend>("a", j)), RunStart{}); }
  EXPECT_TRUE(j->all().empty());
}

TEST(Tracker, RefusedRecordIsNotQueued) {
  auto j = std::make_shared<Journal>();
  Tracker t(one(std::make_unique<FakeBackend>("a", j)), RunStart{});
  EXPECT_THROW(t.log(0, values({{"loss", 1}, {"refused", 2}})), UsageError);
  t.end();
  EXPECT_EQ(t.counts().records, 0u);
  EXPECT_TRUE(j->all().empty());
}

TEST(Tracker, LogNeverWaitsForABlockedBackend) {
  auto j = std::make_shared<Journal>();
  Gate gate;
  auto fake = std::make_unique<FakeBackend>("a", j);
  gate.arm(*fake, 0);
  Tracker t(one(std::move(fake)), RunStart{});
  t.log(0, values({{"x", 0}}));
  ASSERT_EQ(gate.entered.get_future().wait_for(kBound), std::future_status::ready) << "the writer never wrote step 0";
  auto logging = std::async(std::launch::async, [&] {
    for (int s = 1; s <= 100; ++s) t.log(s, values({{"x", double(s)}}));
  });
  const auto logged = logging.wait_for(kBound);
  const TrackerCounts while_blocked = t.counts();
  gate.release.set_value();
  ASSERT_EQ(logged, std::future_status::ready) << "log() waited for the blocked backend";
  EXPECT_EQ(while_blocked.records, 101u);
  EXPECT_EQ(while_blocked.written, 0u);
  t.end();
  EXPECT_EQ(t.counts().written, 101u);
  const auto r = j->records();
  ASSERT_EQ(r.size(), 102u);
  for (int s = 0; s <= 100; ++s) EXPECT_EQ(r[s + 1], "scalars " + std::to_string(s) + " x");
}

TEST(Tracker, FullQueueDropsAndCounts) {
  auto j = std::make_shared<Journal>();
  Gate gate;
  auto fake = std::make_unique<FakeBackend>("a", j);
  gate.arm(*fake, 0);
  Tracker t(one(std::move(fake)), RunStart{}, Limits{4, 60});
  t.log(0, values({{"x", 0}}));
  ASSERT_EQ(gate.entered.get_future().wait_for(kBound), std::future_status::ready);
  testing::internal::CaptureStderr();
  for (int s = 1; s <= 10; ++s) t.log(s, values({{"x", double(s)}}));  // 4 queued, 6 dropped
  const TrackerCounts c = t.counts();
  gate.release.set_value();
  t.end();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(c.records, 5u);
  EXPECT_EQ(c.dropped, 6u);
  EXPECT_EQ(count_of(err, "queue holds 4 records"), 1u) << err;
  EXPECT_NE(err.find("6 records were dropped"), std::string::npos) << err;
  EXPECT_EQ(j->records(), (std::vector<std::string>{"begin 0 ", "scalars 0 x", "scalars 1 x", "scalars 2 x",
                                                    "scalars 3 x", "scalars 4 x"}));
}

TEST(Tracker, WriteErrorStopsThatBackendOnly) {
  auto ja = std::make_shared<Journal>(), jb = std::make_shared<Journal>();
  auto a = std::make_unique<FakeBackend>("a", ja);
  a->on_scalars = [](int64_t step) {
    if (step == 2) throw WriteError("cannot write 10 bytes to /fake/a: No space left on device", ENOSPC);
  };
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::move(a));
  backends.push_back(std::make_unique<FakeBackend>("b", jb));
  Tracker t(std::move(backends), RunStart{});
  testing::internal::CaptureStderr();
  for (int s = 0; s < 5; ++s) t.log(s, values({{"x", double(s)}}));
  t.end();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(t.live_backends(), std::vector<std::string>{"b"});
  EXPECT_EQ(ja->records(), (std::vector<std::string>{"begin 0 ", "scalars 0 x", "scalars 1 x"}));
  EXPECT_EQ(jb->records().size(), 6u);
  EXPECT_EQ(count_of(err, "[xlaunch] warning: tracking: "), 1u) << err;
  EXPECT_EQ(count_of(err, "No space left on device"), 1u) << err;  // not said twice
  for (const char* part : {"the a tracker stops writing /fake/a", "the disk is full", "training goes on", "b go on"})
    EXPECT_NE(err.find(part), std::string::npos) << part << " not in: " << err;
}

TEST(Tracker, AnyExceptionStopsTheBackendAndStaysInTheThread) {
  auto j = std::make_shared<Journal>();
  auto a = std::make_unique<FakeBackend>("a", j);
  a->on_flush = [] { throw 42; };
  Tracker t(one(std::move(a)), RunStart{});
  testing::internal::CaptureStderr();
  t.log(0, values({{"x", 0}}));
  t.end();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(t.live_backends().empty());
  EXPECT_NE(err.find("the a tracker stops writing /fake/a: an exception that is not a std::exception"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("with no tracker writing"), std::string::npos) << err;
}

TEST(Tracker, EndGivesUpOnAStuckBackendAndSaysSo) {
  auto j = std::make_shared<Journal>();
  Gate gate;
  auto fake = std::make_unique<FakeBackend>("slow", j);
  gate.arm(*fake, 1);
  std::string err;
  {
    Tracker t(one(std::move(fake)), RunStart{}, Limits{16, 0.5});
    for (int s = 0; s < 3; ++s) t.log(s, values({{"x", double(s)}}));
    ASSERT_EQ(gate.entered.get_future().wait_for(kBound), std::future_status::ready);
    testing::internal::CaptureStderr();
    t.end();
    t.end();  // idempotent: says nothing more
    err = testing::internal::GetCapturedStderr();
  }
  gate.release.set_value();
  // The detached writer returns from the stuck write, writes nothing more, and frees the backends.
  ASSERT_EQ(gate.destroyed.get_future().wait_for(kBound), std::future_status::ready);
  EXPECT_EQ(count_of(err, "[xlaunch] warning: tracking: "), 1u) << err;
  for (const char* part : {"gave up after 0.5 s", "stuck in the slow tracker's scalars() on /fake/slow",
                           "1 queued record is not written to slow", "left behind"})
    EXPECT_NE(err.find(part), std::string::npos) << part << " not in: " << err;
  EXPECT_EQ(j->records(), (std::vector<std::string>{"begin 0 ", "scalars 0 x", "scalars 1 x"}));
}

TEST(Tracker, ResumeBeginsAgainInQueueOrder) {
  auto j = std::make_shared<Journal>();
  Tracker t(one(std::make_unique<FakeBackend>("a", j)), RunStart{});
  for (int s = 0; s < 3; ++s) t.log(s, values({{"x", double(s)}}));
  t.resume(1, "ckpt-1");
  t.log(1, values({{"x", 1}}));
  t.end();
  EXPECT_EQ(j->records(), (std::vector<std::string>{"begin 0 ", "scalars 0 x", "scalars 1 x", "scalars 2 x",
                                                    "begin 1 ckpt-1", "scalars 1 x"}));
}

TEST(Tracker, ResumeBeforeAnyRecordBeginsOnce) {
  auto j = std::make_shared<Journal>();
  Tracker t(one(std::make_unique<FakeBackend>("a", j)), RunStart{});
  t.resume(5, "ckpt-5");
  t.log(5, values({{"x", 5}}));
  t.end();
  EXPECT_EQ(j->records(), (std::vector<std::string>{"begin 5 ckpt-5", "scalars 5 x"}));
}

TEST(Tracker, NonFiniteValuesAreWrittenSaidOnceAndCounted) {
  auto j = std::make_shared<Journal>();
  Tracker t(one(std::make_unique<FakeBackend>("a", j)), RunStart{});
  const double inf = std::numeric_limits<double>::infinity();
  testing::internal::CaptureStderr();
  t.log(2, values({{"loss", 1}}));
  t.log(3, values({{"loss", std::nan("")}}));
  t.log(4, values({{"loss", inf}, {"lr", -inf}}));
  t.end();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(t.counts().non_finite, 3u);
  EXPECT_EQ(count_of(err, "[xlaunch] warning: tracking: "), 2u) << err;  // the first, and end()'s summary
  EXPECT_NE(err.find("\"loss\" is nan at step 3"), std::string::npos) << err;
  EXPECT_NE(err.find("3 non-finite values were written as they are (the first: loss at step 3)"), std::string::npos)
      << err;
  EXPECT_EQ(j->records().size(), 4u);
}

TEST(Tracker, EndSaysNothingWhenAllWentWell) {
  auto j = std::make_shared<Journal>();
  Tracker t(one(std::make_unique<FakeBackend>("a", j)), RunStart{});
  testing::internal::CaptureStderr();
  t.log(0, values({{"x", 0}}));
  t.end();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace xlaunch::track
