// Datasets for the loader tests whose every value is known from the index: sample i has data
// [10i, 10i+1, 10i+2] (float, integer-valued) and target i (int64).
#pragma once

#include <ATen/ops/arange.h>
#include <ATen/ops/scalar_tensor.h>
#include <torch/data/datasets/base.h>
#include <torch/data/example.h>

#include <chrono>
#include <dirent.h>
#include <fstream>
#include <string>
#include <stdexcept>
#include <thread>
#include <vector>

#include "xlaunch/loader.h"

namespace xlaunch::test {

struct IndexDataset : torch::data::datasets::Dataset<IndexDataset> {
  explicit IndexDataset(int64_t n, int64_t fail_at = -1, std::chrono::microseconds delay = {})
      : n(n), fail_at(fail_at), delay(delay) {}
  torch::data::Example<> get(size_t index) override {
    const auto i = static_cast<int64_t>(index);
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    if (i == fail_at) throw std::runtime_error("bad sample on purpose");
    return {at::arange(3, at::kFloat) + static_cast<double>(10 * i), at::scalar_tensor(i, at::kLong)};
  }
  std::optional<size_t> size() const override { return static_cast<size_t>(n); }
  int64_t n;
  int64_t fail_at;
  std::chrono::microseconds delay;
};

struct IndexRows : xlaunch::RowDataset {
  explicit IndexRows(int64_t n) : n(n) {}
  int64_t size() const override { return n; }
  Layout layout() const override { return Layout{{3}, at::kFloat, true, {}, at::kLong}; }
  void write(int64_t index, void* data_row, void* target_row) const override {
    auto* d = static_cast<float*>(data_row);
    for (int k = 0; k < 3; ++k) d[k] = static_cast<float>(10 * index + k);
    *static_cast<int64_t*>(target_row) = index;
  }
  int64_t n;
};

inline std::vector<xlaunch::Batch> run_epoch(xlaunch::Loader& loader) {
  std::vector<xlaunch::Batch> out;
  for (auto& b : loader) out.push_back(b);
  return out;
}

// The dataset indices of an epoch's batches, in order.
inline std::vector<int64_t> targets_of(const std::vector<xlaunch::Batch>& batches) {
  std::vector<int64_t> out;
  for (const auto& b : batches)
    for (int64_t i = 0; i < b.size(); ++i) out.push_back(b.target[i].item<int64_t>());
  return out;
}

inline std::string thread_names() {
  std::string out;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/comm");
      std::string name;
      std::getline(f, name);
      out += name + " ";
    }
    closedir(d);
  }
  return out;
}

inline int thread_count() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

// ATen starts its intra-op thread pool on the first large parallel op (randperm of a big dataset);
// do that before taking a thread-count baseline, so only the loader's threads are counted.
inline void start_aten_threads() { xlaunch::shard_indices(xlaunch::SamplerOptions{1 << 20, 0, 1, 0, true, false}, 0); }

// The thread count once joined threads have left the kernel's task list: pthread_join returns when
// the thread has released its stack, a moment before /proc/self/task forgets it, so poll briefly.
inline int settled_thread_count(int expected) {
  int n = thread_count();
  for (int i = 0; i < 200 && n != expected; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    n = thread_count();
  }
  return n;
}

inline xlaunch::LoaderOptions options(int64_t batch, int workers, int rank = 0, int world = 1) {
  xlaunch::LoaderOptions o;
  o.batch_size = batch;
  o.num_workers = workers;
  o.prefetch_factor = 2;
  o.rank = rank;
  o.world_size = world;
  o.seed = 3;
  return o;
}

}  // namespace xlaunch::test
