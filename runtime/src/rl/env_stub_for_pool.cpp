// TEMPORARY (issue 27, the pool's branch only): the parts of env.h the pool needs, until env.cpp
// lands. The integrator deletes this file (and its line in pool.cmake) at merge.
#include <cmath>
#include <sstream>

#include "xlaunch/error.h"
#include "xlaunch/rl/env.h"

namespace xlaunch::rl {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Space Space::discrete(int64_t n) {
  Space s;
  s.kind = Kind::Discrete;
  s.n = n;
  return s;
}

Space Space::box(std::vector<float> low, std::vector<float> high) {
  Space s;
  s.kind = Kind::Box;
  s.shape = {static_cast<int64_t>(low.size())};
  s.low = std::move(low);
  s.high = std::move(high);
  return s;
}

int64_t Space::numel() const {
  if (kind == Kind::Discrete) return 1;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string Space::describe() const {
  std::ostringstream s;
  if (kind == Kind::Discrete) {
    s << "Discrete(" << n << ")";
    return s.str();
  }
  s << "Box(";
  for (int64_t d : shape) s << d << ",";
  s << ")";
  return s.str();
}

Rng::Rng(uint64_t seed) {
  for (uint64_t& word : s_) word = splitmix64(seed);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform(double low, double high) {
  return low + (high - low) * (static_cast<double>(next() >> 11) * 0x1.0p-53);
}

uint64_t env_seed(uint64_t seed, int64_t index) {
  uint64_t x = seed;
  x = splitmix64(x) ^ static_cast<uint64_t>(index);
  return splitmix64(x);
}

std::unique_ptr<Env> make_env(const std::string& id) {
  throw UsageError("make_env: no environment is registered under '" + id +
                   "' (this build has the environment pool without the environments)");
}

}  // namespace xlaunch::rl
