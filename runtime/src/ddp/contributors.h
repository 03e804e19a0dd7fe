// Which ranks contributed gradients to a synced backward: the reducer's side of uneven inputs
// (Accelerator::join, docs/data-loading.md), with no collective of its own.
//
// The last gradient bucket ends, after the control element (control_word.h), with one element per
// rank. Before a synced backward starts that bucket, rank r writes 1 at index r when it contributes
// (its data has not ended) and 0 when it has joined, and 0 at every other index; the bucket's hook
// averages them with the gradients, so afterwards element r is 1/W where rank r contributed and 0
// where it did not, on every rank alike. read() turns that into a count and the lowest such rank.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace xlaunch {

class Contributors {
 public:
  // elements: the world-size elements the hook averages; rank: this rank's index among them.
  Contributors(at::Tensor elements, int rank);

  // Before the bucket starts in a synced backward (on the stream the bucket's collective follows).
  void write(bool contributing);
  // After the bucket's wait: reads the average on the host (on a device, that waits for it).
  void read();
  // Of the last read: the ranks that contributed (the world size before any read).
  int count() const { return count_; }
  // The lowest rank that contributed in the last read with any contributor (0 before any read).
  int first() const { return first_; }
  int world() const { return static_cast<int>(elements_.numel()); }
  // As if every rank contributed (a new epoch: every rank has data again).
  void reset();

 private:
  at::Tensor elements_;
  int rank_;
  int count_;
  int first_ = 0;
};

}  // namespace xlaunch
