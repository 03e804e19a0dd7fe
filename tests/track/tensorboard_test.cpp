// One process: the TensorBoard backend's parts with literal answers. CRC-32C and its mask (check
// values; the masked ones agree with TensorBoard's own masked_crc32c), the TFRecord framing read
// back by a reader written here, failed writes (a full disk, a file cut back to whole records), a
// run directory that cannot be written, file names, and the Events a backend writes, parsed back.
// TensorBoard's own reader checks the same files from python (tensorboard_oracle_test.py).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "scratch_dir.h"
#include "tb_event.pb.h"
#include "tb_hparams_plugin.pb.h"
#include "track/backends.h"
#include "track/crc32c.h"
#include "track/record_writer.h"
#include "track/tensorboard_backend.h"

using namespace xlaunch::track;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

uint64_t get_le(const std::string& bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(bytes.at(at + i));
  return v;
}

// A TFRecord reader: every record's data, both checksums checked, nothing left over.
std::vector<std::string> read_records(const std::string& bytes) {
  std::vector<std::string> records;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_LE(at + 12, bytes.size()) << "a torn header at " << at;
    if (at + 12 > bytes.size()) break;
    const uint64_t length = get_le(bytes, at, 8);
    EXPECT_EQ(get_le(bytes, at + 8, 4), mask_crc(crc32c(bytes.data() + at, 8))) << "length CRC at " << at;
    EXPECT_LE(at + 12 + length + 4, bytes.size()) << "a torn record at " << at;
    if (at + 12 + length + 4 > bytes.size()) break;
    std::string data = bytes.substr(at + 12, length);
    EXPECT_EQ(get_le(bytes, at + 12 + length, 4), mask_crc(crc32c(data.data(), data.size()))) << "data CRC at " << at;
    records.push_back(std::move(data));
    at += 12 + length + 4;
  }
  return records;
}

std::vector<tensorboard::Event> read_events(const std::string& path) {
  std::vector<tensorboard::Event> events;
  for (const auto& r : read_records(read_bytes(path))) {
    events.emplace_back();
    EXPECT_TRUE(events.back().ParseFromString(r));
  }
  return events;
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().string());
  std::sort(names.begin(), names.end());
  return names;
}

class TensorBoard : public xlaunch::test::ScratchDirTest<> {};

}  // namespace

TEST(Crc32c, CheckValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(Crc32c, Mask) {
  EXPECT_EQ(mask_crc(0), 0xa282ead8u);
  EXPECT_EQ(mask_crc(0x12345678), 0x4f730f40u);
  EXPECT_EQ(mask_crc(0xE3069283), 0xc78ab0e5u);  // TensorBoard's masked_crc32c(b"123456789")
  EXPECT_EQ(mask_crc(0xffffffff), 0xa282ead7u);  // the addition wraps
}

TEST(TfRecord, EmptyRecordByteByByte) {
  // length 0, masked CRC of 8 zero bytes (0x07980329), no data, masked CRC of nothing (0xa282ead8).
  const std::string expected("\0\0\0\0\0\0\0\0\x29\x03\x98\x07\xd8\xea\x82\xa2", 16);
  EXPECT_EQ(frame_record(""), expected);
}

TEST(TfRecord, FramesReadBack) {
  const std::string big(70000, 'x');  // a length past 16 bits
  const std::string bytes = frame_record("abc") + frame_record(big) + frame_record("");
  EXPECT_EQ(bytes.size(), 3 * 16 + 3 + big.size());
  EXPECT_EQ(get_le(bytes, 0, 8), 3u);
  EXPECT_EQ(read_records(bytes), (std::vector<std::string>{"abc", big, ""}));
}

TEST_F(TensorBoard, RecordWriterWritesOnlyAtFlush) {
  RecordWriter w(dir_ + "/records");
  w.append("one");
  w.append("two");
  EXPECT_EQ(read_bytes(dir_ + "/records"), "");
  w.flush();
  EXPECT_EQ(w.size(), 2 * 16 + 6u);
  w.append("three");
  w.flush();
  EXPECT_EQ(read_records(read_bytes(dir_ + "/records")), (std::vector<std::string>{"one", "two", "three"}));
}

TEST_F(TensorBoard, RecordWriterRefusesAnExistingFile) {
  std::ofstream(dir_ + "/taken") << "x";
  try {
    RecordWriter w(dir_ + "/taken");
    FAIL() << "an existing file was opened";
  } catch (const WriteError& e) {
    EXPECT_EQ(e.err(), EEXIST);
    EXPECT_NE(std::string(e.what()).find(dir_ + "/taken"), std::string::npos) << e.what();
  }
}

TEST(TfRecordWriter, FullDiskThrowsEnospc) {
  const int fd = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  RecordWriter w(fd, "/dev/full");
  w.append("a record");
  try {
    w.flush();
    FAIL() << "a write to /dev/full succeeded";
  } catch (const WriteError& e) {
    EXPECT_EQ(e.err(), ENOSPC);
    const std::string what = e.what();
    EXPECT_NE(what.find("/dev/full"), std::string::npos) << what;
    EXPECT_NE(what.find(std::strerror(ENOSPC)), std::string::npos) << what;
  }
  EXPECT_EQ(w.size(), 0u);
}

// A flush that fails part-way (here at the file size limit, EFBIG) leaves the file with the whole
// records of earlier flushes, not a torn one.
TEST_F(TensorBoard, FailedFlushCutsBackToWholeRecords) {
  const std::string path = dir_ + "/records";
  RecordWriter w(path);
  w.append(std::string(100, 'a'));
  w.flush();
  w.append(std::string(100, 'b'));
  w.append(std::string(5000, 'c'));

  struct sigaction ignore = {}, old = {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGXFSZ, &ignore, &old), 0);
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  rlimit small = saved;
  small.rlim_cur = 1000;  // past the first flush and the 'b' record, inside the 'c' one
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  int err = 0;
  try {
    w.flush();
  } catch (const WriteError& e) {
    err = e.err();
  }
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  ASSERT_EQ(::sigaction(SIGXFSZ, &old, nullptr), 0);

  EXPECT_EQ(err, EFBIG);
  EXPECT_EQ(w.size(), 116u);
  EXPECT_EQ(read_records(read_bytes(path)), (std::vector<std::string>{std::string(100, 'a')}));
  w.append("after");  // the writer goes on where the last whole record ended
  w.flush();
  EXPECT_EQ(read_records(read_bytes(path)), (std::vector<std::string>{std::string(100, 'a'), "after"}));
}

TEST_F(TensorBoard, UnwritableRunDirIsRefusedAtConstruction) {
  // Under a regular file: refused whoever runs the test (root ignores permission bits).
  std::ofstream(dir_ + "/file") << "x";
  const std::string run_dir = dir_ + "/file/run";
  try {
    make_tensorboard_backend(run_dir);
    FAIL() << "a run directory under a file was accepted";
  } catch (const WriteError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.err(), ENOTDIR);
    EXPECT_NE(what.find(run_dir), std::string::npos) << what;
    EXPECT_NE(what.find(std::strerror(ENOTDIR)), std::string::npos) << what;
  }
}

TEST(TensorBoardNames, FileName) {
  EXPECT_EQ(event_file_name(1733300000, "node7", 4242, 0), "events.out.tfevents.1733300000.node7.4242.0");
  EXPECT_EQ(event_file_name(42, "h.example.org", 1, 3), "events.out.tfevents.0000000042.h.example.org.1.3");
}

TEST(TensorBoardNames, SecondsComeAfterTheNewestFile) {
  EXPECT_EQ(event_file_seconds(1000, {}), 1000);
  EXPECT_EQ(event_file_seconds(1000, {".", "..", "metrics.csv", "events.out.tfevents.0000000900.a.1.0"}), 1000);
  EXPECT_EQ(event_file_seconds(1000, {"events.out.tfevents.0000001000.a.1.0"}), 1001);
  EXPECT_EQ(event_file_seconds(1000, {"events.out.tfevents.0000001005.b.9.1", "events.out.tfevents.0000000999.a.1.0"}),
            1006);
  // TensorFlow's own names (no pid) count too; names that are not event files do not.
  EXPECT_EQ(event_file_seconds(1000, {"events.out.tfevents.0000001000.host"}), 1001);
  EXPECT_EQ(event_file_seconds(1000, {"events.out.tfevents.x.host", "events.out.tfevents.", "tfevents.2000"}), 1000);
}

TEST(TensorBoardNames, HparamsMarkdown) {
  const xlaunch::HParams config{{"lr", 0.001}, {"amp", true}, {"opt", "adam|w"}, {"batch", 64}};
  EXPECT_EQ(hparams_markdown(config),
            "| name | value |\n|---|---|\n"
            "| amp | true |\n| batch | 64 |\n| lr | 0.001 |\n| opt | adam\\|w |\n");
}

TEST_F(TensorBoard, BackendWritesTheEventsInOrder) {
  auto tb = make_tensorboard_backend(dir_ + "/run");
  EXPECT_EQ(tb->name(), "tensorboard");
  const auto files = event_files(dir_ + "/run");
  ASSERT_EQ(files.size(), 1u);  // made by the constructor
  EXPECT_EQ(tb->where(), files[0]);

  RunStart start;
  start.wall_time = 1733300000.5;
  start.config = {{"lr", 0.25}, {"amp", false}, {"opt", "sgd"}};
  tb->begin(start);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  tb->scalars(0, 1733300001.0, {{"loss", 0.1}, {"lr", nan}});
  tb->scalars(1, 1733300002.0, {{"loss", -inf}, {"acc", 1e39}});
  Histogram h;
  h.tag = "w";
  h.min = -1, h.max = 2, h.num = 3, h.sum = 1.5, h.sum_squares = 5.25;
  h.bucket_limit = {0, 2}, h.bucket = {1, 2};
  tb->histogram(1, 1733300003.0, h);
  start.first_step = 1;
  start.resumed_from = "ckpt/checkpoint_1";
  tb->begin(start);  // resumed in this process: a START only
  tb->flush();

  const auto events = read_events(files[0]);
  ASSERT_EQ(events.size(), 8u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_EQ(events[0].wall_time(), 1733300000.5);

  EXPECT_EQ(events[1].session_log().status(), tensorboard::SessionLog::START);
  EXPECT_EQ(events[1].step(), 0);
  EXPECT_EQ(events[1].session_log().msg(), "started");

  const auto& text = events[2].summary().value(0);
  EXPECT_EQ(text.tag(), "hparams/text_summary");
  EXPECT_EQ(text.metadata().plugin_data().plugin_name(), "text");
  EXPECT_EQ(text.tensor().dtype(), tensorboard::DT_STRING);
  EXPECT_EQ(text.tensor().string_val(0), "| name | value |\n|---|---|\n| amp | false |\n| lr | 0.25 |\n| opt | sgd |\n");

  const auto& session = events[3].summary().value(0);
  EXPECT_EQ(session.tag(), "_hparams_/session_start_info");
  EXPECT_EQ(session.metadata().plugin_data().plugin_name(), "hparams");
  tensorboard::hparams::HParamsPluginData data;
  ASSERT_TRUE(data.ParseFromString(session.metadata().plugin_data().content()));
  EXPECT_EQ(data.version(), 0);
  const auto& hp = data.session_start_info().hparams();
  EXPECT_EQ(hp.at("lr").number_value(), 0.25);
  EXPECT_EQ(hp.at("amp").kind_case(), google::protobuf::Value::kBoolValue);
  EXPECT_FALSE(hp.at("amp").bool_value());
  EXPECT_EQ(hp.at("opt").string_value(), "sgd");
  EXPECT_EQ(data.session_start_info().start_time_secs(), 1733300000.5);

  const auto& s0 = events[4].summary();
  EXPECT_EQ(events[4].step(), 0);
  EXPECT_EQ(events[4].wall_time(), 1733300001.0);
  ASSERT_EQ(s0.value_size(), 2);
  EXPECT_EQ(s0.value(0).tag(), "loss");
  EXPECT_EQ(s0.value(0).simple_value(), 0.1f);
  EXPECT_EQ(s0.value(0).metadata().plugin_data().plugin_name(), "scalars");
  EXPECT_TRUE(std::isnan(s0.value(1).simple_value()));
  const auto& s1 = events[5].summary();
  EXPECT_EQ(s1.value(0).simple_value(), -std::numeric_limits<float>::infinity());
  EXPECT_FALSE(s1.value(0).has_metadata());  // "loss" had its metadata at step 0
  EXPECT_EQ(s1.value(1).simple_value(), std::numeric_limits<float>::infinity());  // 1e39 > FLT_MAX
  EXPECT_EQ(s1.value(1).metadata().plugin_data().plugin_name(), "scalars");

  const auto& histo = events[6].summary().value(0).histo();
  EXPECT_EQ(events[6].summary().value(0).tag(), "w");
  EXPECT_EQ(histo.min(), -1);
  EXPECT_EQ(histo.max(), 2);
  EXPECT_EQ(histo.num(), 3);
  EXPECT_EQ(histo.sum(), 1.5);
  EXPECT_EQ(histo.sum_squares(), 5.25);
  EXPECT_EQ(std::vector<double>(histo.bucket_limit().begin(), histo.bucket_limit().end()), (std::vector<double>{0, 2}));
  EXPECT_EQ(std::vector<double>(histo.bucket().begin(), histo.bucket().end()), (std::vector<double>{1, 2}));

  EXPECT_EQ(events[7].session_log().status(), tensorboard::SessionLog::START);
  EXPECT_EQ(events[7].step(), 1);
  EXPECT_EQ(events[7].session_log().msg(), "resumed from ckpt/checkpoint_1");
  EXPECT_EQ(events[7].session_log().checkpoint_path(), "ckpt/checkpoint_1");
}

// A backend's file sorts after the run's earlier files, even one made by another host or process
// within the same second (a name that sorts later, simulated here a minute ahead): TensorBoard
// reads a run's files in name order, and a resumed process's START drops only what came before.
TEST_F(TensorBoard, ANewFileSortsAfterTheRunsEarlierFiles) {
  const std::string later = dir_ + "/" + event_file_name(std::time(nullptr) + 60, "zzzz", 99999, 9);
  std::ofstream(later) << "";
  auto first = make_tensorboard_backend(dir_);
  auto second = make_tensorboard_backend(dir_);
  EXPECT_EQ(event_files(dir_), (std::vector<std::string>{later, first->where(), second->where()}));
}

TEST_F(TensorBoard, NoConfigNoHparams) {
  auto tb = make_tensorboard_backend(dir_);
  tb->begin(RunStart{});
  tb->flush();
  const auto events = read_events(tb->where());
  ASSERT_EQ(events.size(), 2u);  // file_version, START
  EXPECT_TRUE(events[1].has_session_log());
}
