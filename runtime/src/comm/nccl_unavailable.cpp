// make_nccl_communicator for builds without NCCL: a clear error instead of a missing symbol.
#include "comm/nccl_communicator.h"

#include "xlaunch/error.h"

#if !XLAUNCH_HAVE_NCCL
namespace xlaunch {
std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Communicator>, int) {
  throw UsageError("CUDA tensors need the NCCL communicator, but this xlaunch was built without NCCL "
                   "(configure with -DXLAUNCH_WITH_NCCL=ON and NCCL_HOME pointing at NCCL), or pass --cpu");
}
}  // namespace xlaunch
#endif
