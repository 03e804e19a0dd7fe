#include "ddp/bucket_plan.h"

#include <algorithm>
#include <map>

namespace xlaunch {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketParam>& params, const BucketCaps& caps) {
  struct Open {
    std::vector<size_t> members;
    int64_t bytes = 0;
  };
  std::vector<std::vector<size_t>> buckets;
  std::map<std::string, Open> open;  // one open bucket per group
  auto cap_now = [&] { return buckets.empty() ? caps.first_cap_bytes : caps.cap_bytes; };
  for (size_t k = params.size(); k-- > 0;) {
    Open& b = open[params[k].group];
    if (caps.alone_from_cap && params[k].bytes >= caps.cap_bytes && !b.members.empty()) {
      buckets.push_back(std::move(b.members));
      b = Open{};
    }
    b.members.push_back(k);
    b.bytes += params[k].bytes;
    if (b.bytes >= cap_now()) {
      buckets.push_back(std::move(b.members));
      b = Open{};
    }
  }
  // Remaining partial buckets, in the order their first member arrived.
  std::vector<std::vector<size_t>> rest;
  for (auto& [group, b] : open)
    if (!b.members.empty()) rest.push_back(std::move(b.members));
  std::sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) { return a.front() > b.front(); });
  for (auto& r : rest) buckets.push_back(std::move(r));
  return buckets;
}

}  // namespace xlaunch
