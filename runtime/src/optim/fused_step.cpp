// The fused step (fused_step.h): what LibTorch's SGD, Adam and AdamW do per parameter, read from
// their groups and state, with the element loops of fused_kernels.cpp run over chunks of every
// parameter at once.
#include "optim/fused_step.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <typeinfo>
#include <unordered_set>
#include <vector>

#include "optim/fused_kernels.h"
#include "optim/master_state.h"
#include "xlaunch/error.h"
#include "xlaunch/lion.h"

namespace xlaunch::optim {
namespace {

enum class Kind { Sgd, Adam, AdamW, Lion, Other };

Kind kind_of(const torch::optim::Optimizer& o) {
  // The exact types: a subclass may have its own step().
  const std::type_info& t = typeid(o);
  if (t == typeid(torch::optim::SGD)) return Kind::Sgd;
  if (t == typeid(torch::optim::Adam)) return Kind::Adam;
  if (t == typeid(torch::optim::AdamW)) return Kind::AdamW;
  if (t == typeid(Lion)) return Kind::Lion;
  return Kind::Other;
}

// Elements per chunk: 64 KiB of each array, so a thread's chunk stays in L2 and the chunks of a
// large parameter spread over the threads.
constexpr int64_t kChunk = 16384;

std::string where(size_t group, size_t index) {
  return "parameter " + std::to_string(index) + " of group " + std::to_string(group);
}

// "" when t is a dense, contiguous CPU tensor of n elements and of type `type`.
std::string flat(const at::Tensor& t, int64_t n, const std::string& what, at::ScalarType type) {
  if (!t.defined()) return what + " is missing";
  if (t.layout() != c10::kStrided) return what + " is sparse";
  if (!t.device().is_cpu())
    return what + " is on " + t.device().str() + " (the fused step runs on the CPU; on a GPU LibTorch's step runs)";
  if (t.scalar_type() != type)
    return what + " is " + std::string(c10::toString(t.scalar_type())) + " (the fused step takes " +
           std::string(c10::toString(type)) + " here)";
  if (!t.is_contiguous()) return what + " is not contiguous";
  if (t.numel() != n) return what + " has " + std::to_string(t.numel()) + " elements, the parameter " + std::to_string(n);
  return "";
}

std::string flat_float(const at::Tensor& t, int64_t n, const std::string& what) { return flat(t, n, what, at::kFloat); }

kernels::Precision precision_of(at::ScalarType t) {
  return t == at::kBFloat16 ? kernels::Precision::BFloat16
         : t == at::kHalf   ? kernels::Precision::Half
                            : kernels::Precision::Float;
}

bool is_low(const at::Tensor& p) { return p.scalar_type() == at::kBFloat16 || p.scalar_type() == at::kHalf; }

// A parameter the fused step takes: float32, or bfloat16 / float16 (stepped through a float32 master).
std::string parameter_problem(const at::Tensor& p, const std::string& at) {
  const at::ScalarType t = p.scalar_type();
  if (t != at::kFloat && t != at::kBFloat16 && t != at::kHalf && p.device().is_cpu() && p.layout() == c10::kStrided)
    return at + " is " + std::string(c10::toString(t)) + " (the fused step takes float32, bfloat16 and float16 parameters)";
  return flat(p, p.numel(), at, t == at::kBFloat16 || t == at::kHalf ? t : at::kFloat);
}

// The state tensors a parameter's existing state must have, for each kind.
std::string state_problem(Kind kind, const torch::optim::OptimizerParamState& st, const torch::optim::OptimizerOptions& opts,
                          int64_t n, const std::string& at) {
  if (const auto* m = dynamic_cast<const MasterWeights*>(&st); m && m->master.defined()) {
    std::string why = flat_float(m->master, n, at + "'s master weights");
    if (!why.empty()) return why;
  }
  if (kind == Kind::Lion) {
    const auto* s = dynamic_cast<const LionParamState*>(&st);
    if (!s) return at + "'s state is not Lion's";
    return flat_float(s->exp_avg(), n, at + "'s exp_avg");
  }
  if (kind == Kind::Sgd) {
    const auto* s = dynamic_cast<const torch::optim::SGDParamState*>(&st);
    if (!s) return at + "'s state is not SGD's";
    // A state made for a master alone has no momentum buffer until momentum is set.
    if (static_cast<const torch::optim::SGDOptions&>(opts).momentum() == 0 || !s->momentum_buffer().defined()) return "";
    return flat_float(s->momentum_buffer(), n, at + "'s momentum_buffer");
  }
  const torch::Tensor *m, *v, *vmax;
  bool amsgrad;
  if (kind == Kind::Adam) {
    const auto* s = dynamic_cast<const torch::optim::AdamParamState*>(&st);
    if (!s) return at + "'s state is not Adam's";
    m = &s->exp_avg(), v = &s->exp_avg_sq(), vmax = &s->max_exp_avg_sq();
    amsgrad = static_cast<const torch::optim::AdamOptions&>(opts).amsgrad();
  } else {
    const auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(&st);
    if (!s) return at + "'s state is not AdamW's";
    m = &s->exp_avg(), v = &s->exp_avg_sq(), vmax = &s->max_exp_avg_sq();
    amsgrad = static_cast<const torch::optim::AdamWOptions&>(opts).amsgrad();
  }
  std::string why = flat_float(*m, n, at + "'s exp_avg");
  if (why.empty()) why = flat_float(*v, n, at + "'s exp_avg_sq");
  if (why.empty() && amsgrad) why = flat_float(*vmax, n, at + "'s max_exp_avg_sq");
  return why;
}

// One parameter's share of a step: its pointers and scalars.
struct Item {
  kernels::Arrays w;  // the parameter (or its master) and gradient
  float* a;  // exp_avg, or the momentum buffer
  float* b;  // exp_avg_sq
  float* c;  // max_exp_avg_sq (amsgrad)
  int64_t n;
  kernels::AdamScalars adam;
  kernels::SgdScalars sgd;
  kernels::LionScalars lion;
};

template <class Options, class State>
Item adam_item(const Options& o, bool decoupled, const kernels::Arrays& w, int64_t n, State& st) {
  st.step(st.step() + 1);
  const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
  const double bias_correction1 = 1 - std::pow(beta1, st.step());
  const double bias_correction2 = 1 - std::pow(beta2, st.step());
  kernels::AdamScalars s;
  if (o.weight_decay() != 0) {
    if (decoupled) s.decay = static_cast<float>(1 - o.lr() * o.weight_decay());
    else s.l2 = static_cast<float>(o.weight_decay());
  }
  s.beta1 = static_cast<float>(beta1);
  s.one_minus_beta1 = static_cast<float>(1 - beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta2 = static_cast<float>(1 - beta2);
  s.sqrt_bias_correction2 = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(o.eps());
  s.neg_step_size = static_cast<float>(-(o.lr() / bias_correction1));
  s.amsgrad = o.amsgrad();
  return Item{w, st.exp_avg().template data_ptr<float>(), st.exp_avg_sq().template data_ptr<float>(),
              s.amsgrad ? st.max_exp_avg_sq().template data_ptr<float>() : nullptr, n, s, {}, {}};
}

}  // namespace

FusedMode parse_fused_mode(const std::string& s) {
  if (s == "true") return FusedMode::On;
  if (s == "false") return FusedMode::Off;
  return FusedMode::Auto;
}

std::string optimizer_kind(const torch::optim::Optimizer& optimizer) {
  switch (kind_of(optimizer)) {
    case Kind::Sgd: return "SGD";
    case Kind::Adam: return "Adam";
    case Kind::AdamW: return "AdamW";
    case Kind::Lion: return "Lion";
    default: return "this optimizer type";
  }
}

std::string fused_refusal(size_t index, const torch::optim::Optimizer& optimizer, const std::string& why) {
  return "optimizer.fused is true, and optimizer " + std::to_string(index) + " (" + optimizer_kind(optimizer) +
         ") cannot take the fused step: " + why +
         ". Set optimizer.fused: auto to take LibTorch's step where the fused one cannot run, or false";
}

std::string master_weights_summary(const torch::optim::Optimizer& optimizer, bool sharded) {
  int64_t count = 0, elements = 0;
  bool bf16 = false, fp16 = false;
  for (const auto& group : optimizer.param_groups())
    for (const at::Tensor& p : group.params()) {
      if (!is_low(p)) continue;
      ++count;
      elements += p.numel();
      (p.scalar_type() == at::kBFloat16 ? bf16 : fp16) = true;
    }
  if (count == 0) return "";
  const std::string types = bf16 && fp16 ? "bfloat16 and float16" : bf16 ? "bfloat16" : "float16";
  const double bytes = static_cast<double>(elements) * 4;
  char size[32];
  if (bytes < 1e6) std::snprintf(size, sizeof size, "%.1f kB", bytes / 1e3);
  else std::snprintf(size, sizeof size, "%.1f MB", bytes / 1e6);
  const std::string what = sharded ? " shard piece" : " parameter";
  return "float32 master weights for " + std::string(sharded ? "this rank's " : "") + std::to_string(count) + " " +
         types + what + (count == 1 ? "" : "s") + " (+" + size + ")";
}

std::string why_not_fused(const torch::optim::Optimizer& optimizer) {
  const Kind kind = kind_of(optimizer);
  if (kind == Kind::Other)
    return "the optimizer is not LibTorch's SGD, Adam or AdamW, or xlaunch's Lion (the optimizers with a fused step)";
  std::unordered_set<const void*> seen;
  const auto& groups = optimizer.param_groups();
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const auto& params = groups[gi].params();
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor& p = params[i];
      if (!seen.insert(p.unsafeGetTensorImpl()).second)
        return where(gi, i) + " is held twice (LibTorch steps it twice; the fused step would race)";
      if (!p.grad().defined()) continue;
      const std::string at = where(gi, i);
      std::string why = parameter_problem(p, at);
      if (why.empty()) why = flat(p.grad(), p.numel(), at + "'s gradient", p.scalar_type());
      if (!why.empty()) return why;
      const auto it = optimizer.state().find(p.unsafeGetTensorImpl());
      if (it != optimizer.state().end()) {
        why = state_problem(kind, *it->second, groups[gi].options(), p.numel(), at);
        if (!why.empty()) return why;
      }
    }
  }
  return "";
}

void fused_step(torch::optim::Optimizer& optimizer, bool checked) {
  if (!checked) {
    const std::string why = why_not_fused(optimizer);
    if (!why.empty()) throw UsageError("fused optimizer step: " + why);
  }
  const Kind kind = kind_of(optimizer);
  at::NoGradGuard no_grad;
  std::vector<Item> items;
  auto& state = optimizer.state();
  for (auto& group : optimizer.param_groups()) {
    for (const at::Tensor& p : group.params()) {
      const at::Tensor& g = p.grad();
      if (!g.defined()) continue;
      void* key = p.unsafeGetTensorImpl();
      auto it = state.find(key);
      const bool low = is_low(p);
      // State as LibTorch makes it: zeros like the parameter; in float32 for a 16-bit parameter,
      // whose state also holds its master weights.
      const auto zeros = [&] {
        return low ? at::zeros(p.sizes(), p.options().dtype(at::kFloat)) : at::zeros_like(p, at::MemoryFormat::Preserve);
      };
      const auto make = [&](auto plain) -> std::unique_ptr<torch::optim::OptimizerParamState> {
        using State = typename decltype(plain)::element_type;
        if (!low) return plain;
        return std::make_unique<WithMaster<State>>(*plain);
      };
      // Written in place, as LibTorch's in-place operations write it: a graph that saved the
      // parameter and is run backward after the step then fails as it would after LibTorch's step
      // ("modified by an inplace operation") instead of using the new values.
      p.unsafeGetTensorImpl()->bump_version();
      bool first_momentum = false;
      if (kind == Kind::Lion) {
        if (it == state.end()) {  // as Lion::step makes it
          auto st = std::make_unique<LionParamState>();
          st->exp_avg(zeros());
          it = state.emplace(key, make(std::move(st))).first;
        }
      } else if (kind == Kind::Sgd) {
        const bool momentum = static_cast<const torch::optim::SGDOptions&>(group.options()).momentum() != 0;
        if (it == state.end() && (momentum || low)) {
          auto st = std::make_unique<torch::optim::SGDParamState>();
          it = state.emplace(key, make(std::move(st))).first;
        }
        if (momentum) {
          auto& st = static_cast<torch::optim::SGDParamState&>(*it->second);
          if (!st.momentum_buffer().defined()) {  // LibTorch: clone(d_p), which the kernel writes
            st.momentum_buffer(low ? at::empty(p.sizes(), p.options().dtype(at::kFloat))
                                   : at::empty_like(p, at::MemoryFormat::Contiguous));
            first_momentum = true;
          }
        }
      } else if (it == state.end()) {
        const bool amsgrad = kind == Kind::Adam ? static_cast<const torch::optim::AdamOptions&>(group.options()).amsgrad()
                                                : static_cast<const torch::optim::AdamWOptions&>(group.options()).amsgrad();
        auto fill = [&](auto st) {
          st->step(0);
          st->exp_avg(zeros());
          st->exp_avg_sq(zeros());
          if (amsgrad) st->max_exp_avg_sq(zeros());
          it = state.emplace(key, make(std::move(st))).first;
        };
        if (kind == Kind::Adam) fill(std::make_unique<torch::optim::AdamParamState>());
        else fill(std::make_unique<torch::optim::AdamWParamState>());
      }
      kernels::Arrays w{nullptr, nullptr, g.const_data_ptr(), precision_of(p.scalar_type())};
      if (low) {
        // The master: made from the parameter on its first fused step (or after a load without
        // one); the loops re-seed it wherever the parameter was written since.
        at::Tensor* master = master_of(*it->second);
        if (!master || !master->defined()) {
          attach_master(it->second, p.to(at::kFloat).contiguous());
          master = master_of(*it->second);
        }
        w.w = master->data_ptr<float>();
        w.low = p.data_ptr();
      } else {
        // A parameter made float32 since it had a master (model->to(kFloat)) is its own weights: the
        // master is stale, and released (else it would be saved, and held, for nothing).
        if (it != state.end())
          if (at::Tensor* stale = master_of(*it->second); stale && stale->defined()) *stale = at::Tensor();
        w.w = p.data_ptr<float>();
      }
      const int64_t n = p.numel();
      if (kind == Kind::Lion) {
        const auto& o = static_cast<const LionOptions&>(group.options());
        const auto [beta1, beta2] = o.betas();
        kernels::LionScalars s;
        if (o.weight_decay() != 0) s.decay = static_cast<float>(1 - o.lr() * o.weight_decay());
        s.beta1 = static_cast<float>(beta1);
        s.one_minus_beta1 = static_cast<float>(1 - beta1);
        s.beta2 = static_cast<float>(beta2);
        s.one_minus_beta2 = static_cast<float>(1 - beta2);
        s.neg_lr = static_cast<float>(-o.lr());
        float* m = static_cast<LionParamState&>(*it->second).exp_avg().data_ptr<float>();
        items.push_back(Item{w, m, nullptr, nullptr, n, {}, {}, s});
        continue;
      }
      if (kind == Kind::Sgd) {
        const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
        kernels::SgdScalars s;
        s.weight_decay = static_cast<float>(o.weight_decay());
        s.momentum = static_cast<float>(o.momentum());
        s.one_minus_dampening = static_cast<float>(1 - o.dampening());
        s.neg_lr = static_cast<float>(-1 * o.lr());
        s.nesterov = o.nesterov();
        s.first = first_momentum;
        float* buf = o.momentum() != 0
                         ? static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer().data_ptr<float>()
                         : nullptr;
        items.push_back(Item{w, buf, nullptr, nullptr, n, {}, s, {}});
        continue;
      }
      if (kind == Kind::Adam)
        items.push_back(adam_item(static_cast<const torch::optim::AdamOptions&>(group.options()), false, w, n,
                                  static_cast<torch::optim::AdamParamState&>(*it->second)));
      else
        items.push_back(adam_item(static_cast<const torch::optim::AdamWOptions&>(group.options()), true, w, n,
                                  static_cast<torch::optim::AdamWParamState&>(*it->second)));
    }
  }
  // Every parameter's chunks, stepped over the intra-op threads.
  struct Chunk {
    const Item* item;
    int64_t begin, end;
  };
  std::vector<Chunk> chunks;
  for (const Item& item : items)
    for (int64_t b = 0; b < item.n; b += kChunk) chunks.push_back({&item, b, std::min(item.n, b + kChunk)});
  at::parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) {
      const Chunk& c = chunks[static_cast<size_t>(k)];
      const Item& t = *c.item;
      const int64_t b = c.begin, n = c.end - c.begin;
      if (kind == Kind::Sgd) kernels::sgd_range(t.sgd, t.w, b, t.a, n);
      else if (kind == Kind::Lion) kernels::lion_range(t.lion, t.w, b, t.a, n);
      else kernels::adam_range(t.adam, t.w, b, t.a, t.b, t.c, n);
    }
  });
}

}  // namespace xlaunch::optim
