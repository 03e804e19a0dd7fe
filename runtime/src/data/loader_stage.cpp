#include "data/loader_stage.h"

#include <ATen/ops/empty.h>

#include "xlaunch/error.h"

namespace xlaunch::detail {
namespace {

class CpuStage final : public DeviceStage {
 public:
  at::Tensor host_empty(at::IntArrayRef sizes, at::ScalarType dtype) const override {
    return at::empty(sizes, at::TensorOptions().dtype(dtype));
  }
  std::shared_ptr<void> start_copy(at::ArrayRef<at::Tensor*>) const override { return nullptr; }
  void hand_over(at::ArrayRef<at::Tensor*>, const std::shared_ptr<void>&) const override {}
  std::string describe() const override { return "cpu"; }
};

}  // namespace

std::shared_ptr<const DeviceStage> make_device_stage(c10::Device device, bool pin_memory, const std::string& user) {
  if (device.is_cpu()) return std::make_shared<CpuStage>();
  if (device.is_cuda()) {
#if XLAUNCH_HAVE_CUDA
    return make_cuda_stage(device, pin_memory, user);
#else
    (void)pin_memory;
    throw UsageError(user + ": device " + device.str() + " asked for, but this libxlaunch was built "
                     "without CUDA device paths; reconfigure with a CUDA LibTorch and "
                     "-DXLAUNCH_WITH_CUDA=ON, or use the CPU");
#endif
  }
  throw UsageError(user + ": device " + device.str() + " is not supported; use the CPU or a CUDA device");
}

}  // namespace xlaunch::detail
