#include "xlaunch/split.h"

#include <algorithm>
#include <string>

#include "xlaunch/error.h"

namespace xlaunch {

std::vector<int64_t> split_indices(int64_t n, int rank, int world, bool apply_padding) {
  if (world < 1 || rank < 0 || rank >= world || n < 0)
    throw UsageError("split_between_processes: rank " + std::to_string(rank) + " of " + std::to_string(world) +
                     " ranks over " + std::to_string(n) + " items is not a place in the job");
  const int64_t q = n / world, extra = n % world;
  const int64_t begin = rank * q + std::min<int64_t>(rank, extra);
  const int64_t end = begin + q + (rank < extra ? 1 : 0);
  std::vector<int64_t> mine;
  for (int64_t i = begin; i < end; ++i) mine.push_back(i);
  if (apply_padding && n > 0) {
    const int64_t each = q + (extra > 0 ? 1 : 0);
    const int64_t last = mine.empty() ? n - 1 : mine.back();
    mine.resize(each, last);
  }
  return mine;
}

}  // namespace xlaunch
