#include "ddp/zero_layout.h"

#include <algorithm>

namespace xlaunch::zero {

int64_t shard_elements(int64_t elements, int world) { return (elements + world - 1) / world; }

std::vector<Piece> pieces_of_rank(const std::vector<std::vector<size_t>>& buckets, const std::vector<int64_t>& numel,
                                  const std::vector<int>& group, int world, int rank) {
  std::vector<Piece> out;
  for (size_t b = 0; b < buckets.size(); ++b) {
    int64_t elements = 0;
    for (size_t i : buckets[b]) elements += numel[i];
    const int64_t shard = shard_elements(elements, world);
    const int64_t begin = shard * rank, end = std::min(elements, begin + shard);
    int64_t offset = 0;  // of the current member in the bucket
    for (size_t i : buckets[b]) {
      const int64_t from = std::max(begin, offset), to = std::min(end, offset + numel[i]);
      if (from < to && group[i] >= 0) {
        const Segment seg{i, from - offset, to - from};
        // Joined to the piece before when it continues it in the same group.
        Piece* last = out.empty() ? nullptr : &out.back();
        if (last && last->bucket == b && last->group == group[i] && last->offset + last->length == from) {
          last->length += seg.length;
          last->segments.push_back(seg);
        } else {
          out.push_back(Piece{b, from, seg.length, group[i], {seg}});
        }
      }
      offset += numel[i];
    }
  }
  return out;
}

}  // namespace xlaunch::zero
