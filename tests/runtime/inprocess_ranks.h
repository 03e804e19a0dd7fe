// Ranks as threads of one process, each with its InProcessCommunicator: for tests of collective
// code without mpirun.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "comm/inprocess_communicator.h"

namespace xlaunch::test {

// Runs fn on `n` threads, one communicator each; rethrows the first failure.
inline void run_ranks(int n, const std::function<void(std::shared_ptr<InProcessCommunicator>)>& fn) {
  auto group = std::make_shared<InProcessGroup>(n);
  std::vector<std::shared_ptr<InProcessCommunicator>> comms;
  for (int r = 0; r < n; ++r) comms.push_back(std::make_shared<InProcessCommunicator>(group, r));
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(comms[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace xlaunch::test
