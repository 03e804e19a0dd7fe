// Trains through the Accelerator on a dataset whose samples carry their ids (test_datasets.h:
// target i), logging which samples each rank trained on, so that resume_world_test.sh can stop a
// job mid-epoch on one world size and resume it on another, and check the samples read.
//
//   resume_world --n N --batch B --epochs E --out PREFIX       train epochs loader.epoch().. E-1;
//                [--resume DIR]                                 load_state first
//                [--save DIR --stop-after-steps K]              save_state after K steps, then exit
//     Rank r writes the ids of the samples it trained on in epoch e to PREFIX.e<e>.r<r>, and
//     rank 0 the ids gather_for_metrics returned for them to PREFIX.e<e>.gathered (one a line).
//   resume_world --check N EPOCH PADDING PREFIX...               the runs' files of EPOCH together
//     hold every sample once plus PADDING repeats of the epoch's first samples, and their gathers
//     are the epoch's global order; exit 1 naming what differs.
#include <torch/torch.h>

#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "test_datasets.h"
#include "test_args.h"
#include "xlaunch/accelerator.h"

namespace {

using xlaunch::test::get;

constexpr uint64_t kSeed = 11;

void append_ids(std::ofstream& out, const at::Tensor& ids) {
  const at::Tensor c = ids.to(at::kLong).contiguous();
  for (int64_t i = 0; i < c.numel(); ++i) out << c.data_ptr<int64_t>()[i] << "\n";
  out.flush();
}

int train(const std::map<std::string, std::string>& args) {
  const int64_t epochs = std::stoll(get(args, "--epochs", "2"));
  const int64_t stop_after = std::stoll(get(args, "--stop-after-steps", "0"));
  const std::string out = get(args, "--out"), save = get(args, "--save"), resume = get(args, "--resume");
  xlaunch::Accelerator acc;
  acc.set_seed(5);
  torch::nn::Linear net(3, 1);
  auto model = acc.prepare(net);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(1e-3));
  auto& opt = acc.prepare(sgd);
  xlaunch::LoaderOptions lo;
  lo.batch_size = std::stoll(get(args, "--batch", "4"));
  lo.seed = kSeed;
  lo.num_workers = 1;
  auto& loader = acc.prepare(xlaunch::Loader(xlaunch::test::IndexDataset(std::stoll(get(args, "--n"))), lo));
  if (!resume.empty()) acc.load_state(resume);

  const std::string rank = std::to_string(acc.process_index());
  int64_t steps = 0;
  for (int64_t epoch = loader.epoch(); epoch < epochs; ++epoch) {
    const std::string e = out + ".e" + std::to_string(epoch);
    std::ofstream trained(e + ".r" + rank);
    std::ofstream gathered;
    if (acc.is_main_process()) gathered.open(e + ".gathered");
    for (auto& batch : loader) {
      append_ids(trained, batch.target);
      const at::Tensor all = acc.gather_for_metrics(batch.target);
      if (acc.is_main_process()) append_ids(gathered, all);
      auto loss = model(batch.data * 1e-3).pow(2).mean();
      acc.backward(loss);
      opt.step();
      opt.zero_grad();
      if (++steps == stop_after) {
        acc.save_state(save);
        acc.print("saved ", save, " in epoch ", epoch, " after batch ", batch.index, " (this run's step ", steps, ")");
        return 0;
      }
    }
  }
  acc.print("done: ", steps, " steps");
  return 0;
}

std::vector<int64_t> read_ids(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<int64_t> ids;
  for (int64_t x; in >> x;) ids.push_back(x);
  return ids;
}

// The files PREFIX.e<epoch>.r<rank> that exist.
std::vector<std::string> rank_files(const std::string& prefix, int64_t epoch) {
  std::vector<std::string> out;
  for (int r = 0; r < 64; ++r) {
    const std::string path = prefix + ".e" + std::to_string(epoch) + ".r" + std::to_string(r);
    if (!std::ifstream(path)) break;
    out.push_back(path);
  }
  if (out.empty()) throw std::runtime_error("no " + prefix + ".e" + std::to_string(epoch) + ".r0");
  return out;
}

int check(int argc, char** argv) {
  if (argc < 6) throw std::runtime_error("usage: resume_world --check N EPOCH PADDING PREFIX...");
  const int64_t n = std::stoll(argv[2]), epoch = std::stoll(argv[3]), padding = std::stoll(argv[4]);
  const std::vector<int64_t> order = xlaunch::shard_indices(xlaunch::SamplerOptions{n, 0, 1, kSeed, true, false}, epoch);
  std::vector<int64_t> gathered;
  std::map<int64_t, int64_t> count;
  for (int a = 5; a < argc; ++a) {
    const std::vector<int64_t> g = read_ids(std::string(argv[a]) + ".e" + std::to_string(epoch) + ".gathered");
    gathered.insert(gathered.end(), g.begin(), g.end());
    for (const std::string& f : rank_files(argv[a], epoch))
      for (int64_t id : read_ids(f)) ++count[id];
  }
  int failures = 0;
  if (gathered != order) {
    std::cerr << "FAIL: the runs' gather_for_metrics results are not epoch " << epoch << "'s order of " << n
              << " samples, each once (" << gathered.size() << " gathered)\n";
    ++failures;
  }
  // Repeats allowed: the padding, which wraps around to the epoch's first samples.
  std::map<int64_t, int64_t> expected;
  for (int64_t id : order) expected[id] = 1;
  for (int64_t p = 0; p < padding; ++p) ++expected[order[p % n]];
  for (const auto& [id, want] : expected)
    if (count[id] != want) {
      std::cerr << "FAIL: sample " << id << " was trained on " << count[id] << " times, expected " << want << "\n";
      ++failures;
    }
  if (count.size() != expected.size()) {
    std::cerr << "FAIL: ids outside the dataset were trained on\n";
    ++failures;
  }
  if (failures == 0) std::cout << "epoch " << epoch << ": every sample once, " << padding << " padded, gathers exact\n";
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::string(argv[1]) == "--check") return check(argc, argv);
    return train(xlaunch::test::parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
