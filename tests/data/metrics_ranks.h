// What the gather_for_metrics tests share: ranks as threads over the in-process communicator, and
// tensors as text for literal expectations.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/inprocess_communicator.h"

namespace xlaunch::test {

inline std::vector<int64_t> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// Runs fn(comm) on `world` threads; returns each rank's result or error text.
inline std::vector<std::string> on_ranks(int world, const std::function<std::string(Communicator&)>& fn) {
  auto group = std::make_shared<InProcessGroup>(world);
  std::vector<std::string> out(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      InProcessCommunicator comm(group, r);
      try {
        out[r] = fn(comm);
      } catch (const std::exception& e) {
        out[r] = std::string("error: ") + e.what();
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

inline std::string text(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += std::to_string(x) + " ";
  return s;
}

}  // namespace xlaunch::test
