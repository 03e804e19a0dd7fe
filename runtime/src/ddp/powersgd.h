// PowerSGD gradient compression (Vogels, Karimireddy and Jaggi, NeurIPS 2019), the way PyTorch's
// DDP powerSGD_hook does it, for one gradient bucket.
//
// Each weight matrix M (a member of 2 or more dimensions, seen as [size(0), rest]) is sent as two
// thin factors instead of itself: with Q [m x r] kept from the previous step (warm start; stored
// transposed, [r x m], so that every product is a fast one for BLAS),
//   P = M Q             allreduced (sum), then orthonormalised (Gram-Schmidt, identical on every rank)
//   Q = M^T P           allreduced (sum), divided by the world size: the average's projection
//   M <- P Q^T          the rank-r approximation of the average of M over the ranks.
// Error feedback: what the approximation missed on this rank (M + error - P Q^T) is kept and added
// to the next step's gradient, so nothing is lost, only delayed. Members where compression does not
// pay (vectors such as biases, and matrices with (n + m) r >= n m / 2) are averaged exactly, in one
// allreduce. Q starts from the same random matrix on every rank (a fixed seed).
//
// Bytes per step for an n x m matrix: (n + m) r instead of n m. The three steps run where the
// powersgd communication hook (ddp/hooks/powersgd.cpp) calls them: start() when the bucket's
// gradients are complete (during backward, so the first allreduces overlap the rest of it),
// exchange() once every bucket has started, complete() as the reducer waits for the bucket.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "xlaunch/extend/communicator.h"

namespace xlaunch {

class PowerSgdBucket {
 public:
  // views: the bucket's members, shaped like their parameters (floating point). Collective: the
  // factor buffers come from comm->allocate, on every rank in the same order.
  PowerSgdBucket(const std::vector<at::Tensor>& views, std::shared_ptr<Communicator> comm, int rank, uint64_t seed);

  // Adds the error feedback, computes P, starts the allreduces of P and of the exact members.
  void start();
  // Waits for P, orthonormalises it, computes Q and starts its allreduce.
  void exchange();
  // Waits for everything; the views then hold the average (exact members) or its approximation.
  void complete();

  // Whether any member is compressed (otherwise the bucket is one exact allreduce).
  bool compresses() const { return !matrices_.empty(); }
  // The state a resumed run needs: "q" (the warm start, the same on every rank) and "error.<k>" per
  // compressed member (this rank's). Tensors are the live ones; copy before changing them.
  std::vector<std::pair<std::string, at::Tensor>> state() const;
  // "" when `saved` (from state(), possibly without errors) fits this bucket, else why not.
  std::string mismatch(const std::vector<std::pair<std::string, at::Tensor>>& saved) const;
  // Restores q, and the errors when `saved` has them (else they restart from zero).
  void load(const std::vector<std::pair<std::string, at::Tensor>>& saved);

 private:
  struct Matrix {
    at::Tensor m;      // [n, m] over the bucket's memory: the gradient
    at::Tensor p, qt;  // P [n, r] and Q transposed [r, m], over p_buf_ and q_buf_
    at::Tensor error;  // [n, m]
  };
  std::vector<Matrix> matrices_;
  std::vector<at::Tensor> exact_;  // members averaged exactly, through exact_buf_
  at::Tensor exact_buf_, p_buf_, q_buf_;
  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<Work> exact_work_, p_work_, q_work_;
};

// Gram-Schmidt over the columns of p ([n, r]), in place; a zero column stays zero.
void orthonormalize_columns(at::Tensor& p);

}  // namespace xlaunch
