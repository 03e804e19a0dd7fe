// Agreeing across ranks before going on: the one way every part of the runtime makes ranks fail
// together (or go on together) instead of leaving some of them waiting in a collective that the
// others will never enter. All of these are collective: call them on every rank, in the same order.
#pragma once

#include <string>

#include "xlaunch/extend/communicator.h"

namespace xlaunch {

// What every rank learns about a step that may have failed on some ranks.
struct Agreement {
  int rank = -1;        // the lowest rank on which the step failed; -1 when it failed nowhere
  std::string message;  // that rank's error
  bool failed() const { return rank >= 0; }
};

// Every rank passes its own error ("" when the step went well there) and gets the same Agreement.
// One small allreduce when nothing failed; the messages travel only when something did.
Agreement agree_on_error(Communicator& comm, const std::string& error_here);

// Whether every rank holds rank 0's `mine` (settings, a model's description: one item per line).
// Each rank that differs names its own first differing line ("rank 2 has 'x' where rank 0 has
// 'y'"); then the ranks agree, so every rank gets the same Agreement instead of some hanging later.
Agreement agree_on_rank0(Communicator& comm, const std::string& mine);

// Rank `root`'s bytes on every rank (a length, then the bytes).
std::string broadcast_string(Communicator& comm, const std::string& mine, int root = 0);

}  // namespace xlaunch
