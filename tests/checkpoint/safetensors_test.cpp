// One process: safetensors weights. Sizes and shard plans (literal answers), the file format byte
// by byte, roundtrips of every dtype, sharded directories and their clean-up, what is refused and
// how, corrupt files, and load_model. The safetensors package checks the same files from python
// (safetensors_oracle_test.py).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <fstream>
#include <iterator>
#include <map>

#include "safetensors_samples.h"
#include "scratch_dir.h"
#include "xlaunch/error.h"
#include "xlaunch/safetensors.h"

using xlaunch::NamedTensors;
using xlaunch::UsageError;
using xlaunch::test::same_bits;

namespace {

class Safetensors : public xlaunch::test::ScratchDirTest<> {
 protected:
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  void TearDown() override {
    xlaunch::set_safetensors_save_hook(nullptr);
    ScratchDirTest::TearDown();
  }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::map<std::string, at::Tensor> by_name(const NamedTensors& tensors) { return {tensors.begin(), tensors.end()}; }

// The message of the UsageError `f` throws ("" when it throws none).
template <class F>
std::string usage_error(F f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// A file of one header and data, for corrupt-file tests.
std::string file_of(const std::string& header, const std::string& data) {
  const uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}

}  // namespace

TEST(ParseSize, TakesHuggingFaceUnits) {
  EXPECT_EQ(xlaunch::parse_size("5GB"), 5000000000);
  EXPECT_EQ(xlaunch::parse_size("500MB"), 500000000);
  EXPECT_EQ(xlaunch::parse_size("10KiB"), 10240);
  EXPECT_EQ(xlaunch::parse_size("2GiB"), 2147483648);
  EXPECT_EQ(xlaunch::parse_size("1TB"), 1000000000000);
  EXPECT_EQ(xlaunch::parse_size("4096"), 4096);
  EXPECT_EQ(xlaunch::parse_size("4096B"), 4096);
  EXPECT_EQ(xlaunch::parse_size("1.5MB"), 1500000);
  EXPECT_EQ(xlaunch::parse_size("0.1KB"), 100);
  EXPECT_EQ(xlaunch::parse_size(" 3 giB "), 3221225472);  // only the final B is case-sensitive
  EXPECT_EQ(xlaunch::parse_size("5gB"), 5000000000);
}

TEST(ParseSize, RefusesWhatIsNotAWholePositiveSize) {
  for (const char* bad : {"", "GB", "abc", "5XB", "-1", "0", "0MB", "5 G", "1.5", "0.0001KB", "5Gb", "5b",
                          "1e9", "99999999999999999999"})
    EXPECT_NE(usage_error([&] { xlaunch::parse_size(bad); }), "") << "'" << bad << "'";
  EXPECT_NE(usage_error([] { xlaunch::parse_size("5Gb"); }).find("bits"), std::string::npos);
  EXPECT_NE(usage_error([] { xlaunch::parse_size("5 G"); }).find("\"5GB\""), std::string::npos);
}

TEST(PlanShards, FillsInOrderAndGivesOversizedTensorsTheirOwnShard) {
  using Plan = std::vector<std::vector<size_t>>;
  EXPECT_EQ(xlaunch::plan_shards({4, 4, 4}, 8), (Plan{{0, 1}, {2}}));
  EXPECT_EQ(xlaunch::plan_shards({8, 8}, 8), (Plan{{0}, {1}}));  // exactly the limit fits
  EXPECT_EQ(xlaunch::plan_shards({3, 3, 3}, 100), (Plan{{0, 1, 2}}));
  // huggingface_hub's order: an oversized tensor's shard comes before the one being filled.
  EXPECT_EQ(xlaunch::plan_shards({2, 10, 2}, 8), (Plan{{1}, {0, 2}}));
  EXPECT_EQ(xlaunch::plan_shards({10, 20}, 8), (Plan{{0}, {1}}));
  EXPECT_EQ(xlaunch::plan_shards({5, 0, 3, 1}, 8), (Plan{{0, 1, 2}, {3}}));  // empty tensors cost nothing
  EXPECT_EQ(xlaunch::plan_shards({}, 8), Plan{});
  EXPECT_THROW(xlaunch::plan_shards({1}, 0), UsageError);
  EXPECT_EQ(xlaunch::shard_file_name(1, 5), "model-00002-of-00005.safetensors");
  EXPECT_EQ(xlaunch::shard_file_name(0, 1), "model-00001-of-00001.safetensors");
}

TEST_F(Safetensors, FileFormatByteByByte) {
  const NamedTensors tensors = {{"b", torch::tensor({1, 2}, torch::kShort)},
                                {"a", torch::tensor({1.5f}, torch::kFloat)},
                                {"c", torch::tensor({7}, torch::kLong)}};
  xlaunch::save_safetensors(tensors, dir_, 1 << 20, {{"note", "hi"}});
  EXPECT_EQ(listing(dir_), std::vector<std::string>{"model.safetensors"});
  const std::string bytes = read_bytes(path("model.safetensors"));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = bytes.substr(8, n);
  // Largest elements first, then by name; "__metadata__" first; padded with spaces.
  const std::string json =
      R"({"__metadata__":{"format":"pt","note":"hi"},"c":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
      R"("a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},"b":{"dtype":"I16","shape":[2],"data_offsets":[12,16]}})";
  EXPECT_EQ(header, json + std::string((8 - json.size() % 8) % 8, ' '));
  const int64_t seven = 7;
  const float one_and_a_half = 1.5f;
  const int16_t one_two[] = {1, 2};
  std::string data(reinterpret_cast<const char*>(&seven), 8);
  data += std::string(reinterpret_cast<const char*>(&one_and_a_half), 4);
  data += std::string(reinterpret_cast<const char*>(one_two), 4);
  EXPECT_EQ(bytes.substr(8 + n), data);
}

TEST_F(Safetensors, EveryDtypeAndShapeRoundtripsBitForBit) {
  const NamedTensors samples = xlaunch::test::safetensors_samples(1);
  xlaunch::save_safetensors(samples, dir_, 1 << 30);
  const auto loaded = by_name(xlaunch::load_safetensors(dir_));
  ASSERT_EQ(loaded.size(), samples.size());
  for (const auto& [name, t] : samples) {
    ASSERT_TRUE(loaded.count(name)) << name;
    EXPECT_TRUE(same_bits(loaded.at(name), t)) << name;
    EXPECT_TRUE(loaded.at(name).is_contiguous()) << name;
  }
  EXPECT_EQ(by_name(xlaunch::load_safetensors(path("model.safetensors"))).size(), samples.size());
  EXPECT_FALSE(samples[4].second.is_contiguous());  // "F64.transposed": the strided path was taken
}

TEST_F(Safetensors, NoTensorsIsOneFileWithTheMetadataAlone) {
  xlaunch::save_safetensors({}, dir_, 1 << 20);
  EXPECT_EQ(listing(dir_), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(xlaunch::load_safetensors(dir_).size(), 0u);
}

TEST_F(Safetensors, ShardsAtASmallLimitWithAnIndex) {
  const NamedTensors tensors = {{"w1", torch::zeros({4}, torch::kFloat)},    // 16 bytes
                                {"w2", torch::ones({2}, torch::kFloat)},     // 8
                                {"big", torch::arange(10, torch::kLong)},   // 80: over the limit
                                {"w3", torch::full({3}, 2.0, torch::kFloat)}};  // 12
  xlaunch::save_safetensors(tensors, dir_, 24, {{"step", "3"}});
  EXPECT_EQ(listing(dir_), (std::vector<std::string>{"model-00001-of-00003.safetensors",
                                                     "model-00002-of-00003.safetensors",
                                                     "model-00003-of-00003.safetensors",
                                                     "model.safetensors.index.json"}));
  const auto index = nlohmann::json::parse(read_bytes(path("model.safetensors.index.json")));
  EXPECT_EQ(index["metadata"]["total_size"], 116);
  // huggingface_hub's order: "big" gets its shard at once, before the one w1 and w2 fill.
  EXPECT_EQ(index["weight_map"], (nlohmann::json{{"big", "model-00001-of-00003.safetensors"},
                                                 {"w1", "model-00002-of-00003.safetensors"},
                                                 {"w2", "model-00002-of-00003.safetensors"},
                                                 {"w3", "model-00003-of-00003.safetensors"}}));
  EXPECT_EQ(by_name(xlaunch::load_safetensors(path("model-00002-of-00003.safetensors"))).size(), 2u);
  const auto loaded = by_name(xlaunch::load_safetensors(dir_));
  ASSERT_EQ(loaded.size(), 4u);
  for (const auto& [name, t] : tensors) EXPECT_TRUE(same_bits(loaded.at(name), t)) << name;
}

TEST_F(Safetensors, ASaveReplacesTheEarlierOneAndLeavesOtherFiles) {
  write_bytes(path("config.json"), "{}\n");
  write_bytes(path("notes.safetensors"), "not ours");
  write_bytes(path("model-1-of-2.safetensors"), "not a shard name");
  const NamedTensors three = {{"a", torch::zeros({4})}, {"b", torch::zeros({4})}, {"c", torch::zeros({4})}};
  xlaunch::save_safetensors(three, dir_, 16);  // 3 shards
  const NamedTensors two = {{"a", torch::ones({4})}, {"b", torch::ones({4})}};
  xlaunch::save_safetensors(two, dir_, 16);  // 2 shards: 00003-of-00003 and the like go
  const std::vector<std::string> others = {"config.json", "model-1-of-2.safetensors", "notes.safetensors"};
  auto with = [&](std::vector<std::string> names) {
    names.insert(names.end(), others.begin(), others.end());
    std::sort(names.begin(), names.end());
    return names;
  };
  EXPECT_EQ(listing(dir_), with({"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                 "model.safetensors.index.json"}));
  EXPECT_EQ(by_name(xlaunch::load_safetensors(dir_)).size(), 2u);
  xlaunch::save_safetensors(two, dir_, 1 << 20);  // one file: the index and the shards go
  EXPECT_EQ(listing(dir_), with({"model.safetensors"}));
  xlaunch::save_safetensors(three, dir_, 16);  // shards again: model.safetensors goes
  EXPECT_EQ(listing(dir_), with({"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                 "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));
  EXPECT_TRUE(same_bits(by_name(xlaunch::load_safetensors(dir_)).at("c"), torch::zeros({4})));
}

TEST_F(Safetensors, AFailedSaveLeavesNoTemporaryAndNoMixOfSaves) {
  xlaunch::save_safetensors({{"a", torch::zeros({4})}, {"b", torch::zeros({4})}}, dir_, 16);
  xlaunch::set_safetensors_save_hook([](const std::string& event) {
    if (event == "renamed model-00001-of-00002.safetensors") throw std::runtime_error("interrupted");
  });
  EXPECT_THROW(xlaunch::save_safetensors({{"a", torch::ones({4})}, {"b", torch::ones({4})}}, dir_, 16),
               std::runtime_error);
  // The old index went before the first new shard took its name: nothing names a mix.
  EXPECT_EQ(listing(dir_), (std::vector<std::string>{"model-00001-of-00002.safetensors",
                                                     "model-00002-of-00002.safetensors"}));
  EXPECT_NE(usage_error([&] { xlaunch::load_safetensors(dir_); }).find("holds neither"), std::string::npos);
  xlaunch::set_safetensors_save_hook(nullptr);
  xlaunch::save_safetensors({{"a", torch::ones({4})}, {"b", torch::ones({4})}}, dir_, 16);
  EXPECT_TRUE(same_bits(by_name(xlaunch::load_safetensors(dir_)).at("b"), torch::ones({4})));
}

TEST_F(Safetensors, StaleTemporariesOfKilledSavesAreRemoved) {
  write_bytes(path(".model-00001-of-00002.safetensors.tmp-99999"), "half");
  write_bytes(path(".model.safetensors.index.json.tmp-12"), "half");
  write_bytes(path(".hidden"), "someone else's");
  xlaunch::save_safetensors({{"a", torch::zeros({1})}}, dir_, 1 << 20);
  EXPECT_EQ(listing(dir_), (std::vector<std::string>{".hidden", "model.safetensors"}));
}

TEST_F(Safetensors, RefusesWhatSafetensorsCannotHoldBeforeWritingAnything) {
  const auto refused = [&](const NamedTensors& t, const std::string& expected) {
    const std::string message = usage_error([&] { xlaunch::save_safetensors(t, dir_, 1 << 20); });
    EXPECT_NE(message.find(expected), std::string::npos) << "message: " << message;
  };
  const at::Tensor w = torch::randn({4, 4});
  refused({{"a", w}, {"a", torch::zeros({1})}}, "two tensors are named 'a'");
  refused({{"", w}}, "empty name");
  refused({{"__metadata__", w}}, "cannot name a tensor");
  refused({{"embed", w}, {"head", w}}, "'embed' and 'head' share memory");
  refused({{"row", w[1]}, {"all", w}}, "share memory");
  refused({{"c", torch::randn({2}, torch::kComplexFloat)}}, "ComplexFloat");
  refused({{"q", at::quantize_per_tensor(torch::randn({2}), 0.1, 0, torch::kQInt8)}}, "QInt8");
  refused({{"s", torch::randn({2, 2}).to_sparse()}}, "is not dense");
  refused({{"u", at::Tensor()}}, "is undefined");
  refused({{"m", torch::empty({2}, torch::kMeta)}}, "meta device");
  EXPECT_EQ(listing(dir_), std::vector<std::string>{});
  EXPECT_NE(usage_error([&] { xlaunch::save_safetensors({{"a", w}}, "", 1 << 20); }).find("directory is empty"),
            std::string::npos);
  EXPECT_NE(usage_error([&] { xlaunch::save_safetensors({{"a", w}}, dir_, 0); }).find("max_shard_bytes is 0"),
            std::string::npos);
  EXPECT_NE(usage_error([&] { xlaunch::save_safetensors({{"a", w}}, dir_, 1, {{"format", "np"}}); }).find("\"pt\""),
            std::string::npos);
}

TEST_F(Safetensors, DisjointViewsOfOneBufferAreSavedAsTheirOwnTensors) {
  const at::Tensor flat = torch::arange(10, torch::kFloat);  // a flat bucket, parameters as views
  xlaunch::save_safetensors({{"w", flat.narrow(0, 0, 6).view({2, 3})}, {"b", flat.narrow(0, 6, 4)}}, dir_, 1 << 20);
  const auto loaded = by_name(xlaunch::load_safetensors(dir_));
  EXPECT_TRUE(same_bits(loaded.at("w"), torch::arange(6, torch::kFloat).view({2, 3})));
  EXPECT_TRUE(same_bits(loaded.at("b"), torch::arange(6, 10, torch::kFloat)));
  EXPECT_EQ(read_bytes(path("model.safetensors")).size() % 8, 0u);  // 40 data bytes after a padded header
}

TEST_F(Safetensors, CorruptFilesAreRefusedNamingTheFileAndTheProblem) {
  const std::string f = path("x.safetensors");
  const std::string good = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const auto refused = [&](const std::string& bytes, const std::string& expected) {
    write_bytes(f, bytes);
    const std::string message = usage_error([&] { xlaunch::load_safetensors(f); });
    EXPECT_NE(message.find(f), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << "message: " << message;
  };
  write_bytes(f, file_of(good, std::string(8, '\0')));
  EXPECT_EQ(xlaunch::load_safetensors(f).size(), 1u);  // the well-formed one is read
  refused("abc", "fewer than the 8");
  refused(file_of(good, std::string(8, '\0')).substr(0, 20), "header length");
  refused(file_of("{not json", ""), "not JSON");
  refused(file_of("[1, 2]", ""), "not a JSON object");
  refused(file_of(good, std::string(4, '\0')), "tensors cover 8 bytes");
  refused(file_of(good, std::string(12, '\0')), "tensors cover 8 bytes");
  refused(file_of(R"({"t":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0')), "\"C64\"");
  refused(file_of(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
          "for 12 bytes");
  refused(file_of(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(8, '\0')), "shape");
  refused(file_of(R"({"t":{"dtype":"F32","shape":[2]}})", std::string(8, '\0')), "lacks one of");
  refused(file_of(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},)"
                  R"("b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", std::string(2, '\0')),
          "starts at data offset 1, not at 0");
  refused(file_of(R"({"t":{"dtype":"U8","shape":[99999999999,99999999999,99999999999],"data_offsets":[0,8]}})", ""),
          "too large");
  refused(file_of(R"({"__metadata__":{"format":1}})", ""), "'format' is not a string");
  const std::string missing = path("nothing.safetensors");
  EXPECT_NE(usage_error([&] { xlaunch::load_safetensors(missing); }).find(missing), std::string::npos);
}

TEST_F(Safetensors, AnIndexMustMatchItsShards) {
  const at::Tensor z = torch::zeros({4});
  xlaunch::save_safetensors({{"a", z}, {"b", z.clone()}, {"c", z.clone()}, {"d", z.clone()}}, dir_, 32);
  const std::string index = path("model.safetensors.index.json");
  const auto refused = [&](const nlohmann::json& weight_map, const std::string& expected) {
    write_bytes(index, nlohmann::json{{"metadata", {{"total_size", 64}}}, {"weight_map", weight_map}}.dump());
    const std::string message = usage_error([&] { xlaunch::load_safetensors(dir_); });
    EXPECT_NE(message.find(expected), std::string::npos) << "message: " << message;
  };
  const std::string one = "model-00001-of-00002.safetensors", two = "model-00002-of-00002.safetensors";
  EXPECT_EQ(xlaunch::load_safetensors(dir_).size(), 4u);  // the index save_safetensors wrote
  refused({{"a", one}, {"b", two}, {"c", two}, {"d", two}}, "holds tensor 'b', which the index maps to " + two);
  refused({{"a", one}, {"c", two}, {"d", two}}, "holds tensor 'b', which the index does not list");
  refused({{"a", one}, {"b", one}, {"c", two}, {"d", two}, {"e", two}}, "maps 'e' to " + two + ", which does not hold it");
  refused({{"a", "../" + one}, {"b", one}, {"c", two}, {"d", two}}, "not a file name in");
  refused({{"a", one}, {"b", one}, {"c", "gone.safetensors"}, {"d", two}}, "gone.safetensors");
  write_bytes(index, "{}");
  EXPECT_NE(usage_error([&] { xlaunch::load_safetensors(dir_); }).find("no \"weight_map\""), std::string::npos);
}

TEST_F(Safetensors, LoadModelCopiesIntoParametersAndBuffers) {
  torch::nn::Sequential saved(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
  saved->to(torch::kDouble);
  {
    torch::NoGradGuard g;
    for (auto& p : saved->parameters()) p.uniform_(-1, 1);
    for (auto& b : saved->buffers()) b.fill_(3);
  }
  NamedTensors state;
  for (const auto& p : saved->named_parameters()) state.emplace_back(p.key(), p.value());
  for (const auto& b : saved->named_buffers()) state.emplace_back(b.key(), b.value());
  xlaunch::save_safetensors(state, dir_, 64);  // sharded
  torch::nn::Sequential fresh(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
  fresh->to(torch::kDouble);
  xlaunch::load_model(*fresh, dir_);
  for (const auto& [name, t] : state) {
    const at::Tensor* mine = fresh->named_parameters().find(name);
    if (!mine) mine = fresh->named_buffers().find(name);
    ASSERT_TRUE(mine) << name;
    EXPECT_TRUE(same_bits(*mine, t)) << name;
  }
  EXPECT_TRUE(fresh->named_parameters()["0.weight"].requires_grad());
}

TEST_F(Safetensors, LoadModelRefusesAnotherModelNamingTheFirstDifferences) {
  torch::nn::Sequential model(torch::nn::Linear(3, 4), torch::nn::Linear(4, 2));
  NamedTensors state = {{"0.weight", torch::zeros({4, 3})}, {"0.bias", torch::zeros({4})},
                        {"1.weight", torch::zeros({2, 4})}, {"extra", torch::zeros({1})}};
  xlaunch::save_safetensors(state, dir_, 1 << 20);
  const at::Tensor before = model->named_parameters()["0.weight"].clone();
  std::string message = usage_error([&] { xlaunch::load_model(*model, dir_); });
  EXPECT_NE(message.find("missing from the file: 1.bias"), std::string::npos) << message;
  EXPECT_NE(message.find("in the file, not in the model: extra"), std::string::npos) << message;
  EXPECT_NE(message.find(dir_), std::string::npos) << message;
  EXPECT_TRUE(same_bits(model->named_parameters()["0.weight"], before));  // nothing copied
  xlaunch::load_model(*model, dir_, /*strict=*/false);  // the names both have are loaded
  EXPECT_TRUE(same_bits(model->named_parameters()["0.weight"], torch::zeros({4, 3})));

  state[0].second = torch::zeros({3, 3});
  state[1].second = torch::zeros({4}, torch::kDouble);
  xlaunch::save_safetensors(state, dir_, 1 << 20);
  message = usage_error([&] { xlaunch::load_model(*model, dir_, /*strict=*/false); });
  EXPECT_NE(message.find("0.weight (file [3, 3] Float, model [4, 3] Float), 0.bias (file [4] Double, model [4] Float)"),
            std::string::npos)
      << message;

  NamedTensors many;
  for (int i = 0; i < 8; ++i) many.emplace_back("x" + std::to_string(i), torch::zeros({1}));
  xlaunch::save_safetensors(many, dir_, 1 << 20);
  message = usage_error([&] { xlaunch::load_model(*model, dir_); });
  EXPECT_NE(message.find("x0, x1, x2, x3, x4 and 3 more"), std::string::npos) << message;
}
