#include "ddp/staging_ring.h"

namespace xlaunch {

int64_t StagingRing::take(int64_t n) {
  int64_t at = -1;
  if (live_.empty()) {
    if (n <= capacity_) at = 0;
  } else {
    const int64_t oldest = live_.front().first, head = live_.back().second;
    if (head > oldest) {
      // Live regions form [oldest, head): room after the head, else from the start up to the oldest.
      if (head + n <= capacity_) at = head;
      else if (n <= oldest) at = 0;
    } else {
      // Wrapped: the free room is [head, oldest).
      if (head + n <= oldest) at = head;
    }
  }
  if (at >= 0) live_.emplace_back(at, at + n);
  return at;
}

bool StagingRing::give_back_oldest() {
  if (live_.empty()) return false;
  live_.pop_front();
  return true;
}

}  // namespace xlaunch
