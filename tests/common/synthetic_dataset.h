// The small dataset the test training jobs share (train_job, train_resume, track_job): sample i
// has 8 features and a class in 0..3, every value a function of i alone, so that any split of it
// over ranks, any resume and any world size can be compared with one process reading it whole.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <vector>

namespace xlaunch::test {

struct Synthetic : torch::data::datasets::Dataset<Synthetic> {
  explicit Synthetic(size_t samples) : samples_(samples) {}
  torch::data::Example<> get(size_t index) override {
    const double i = static_cast<double>(index);
    std::vector<float> x(8);
    for (int k = 0; k < 8; ++k) x[k] = static_cast<float>(std::sin(0.37 * (i * 8 + k)) + 0.1 * std::cos(i + k));
    return {torch::tensor(x), torch::scalar_tensor(static_cast<int64_t>(index * 7 % 4), torch::kLong)};
  }
  std::optional<size_t> size() const override { return samples_; }

 private:
  size_t samples_;
};

}  // namespace xlaunch::test
