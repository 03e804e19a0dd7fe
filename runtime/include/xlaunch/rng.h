// xlaunch's one random generator, for everything that draws on the host: the RL environments
// (rl/env.h) and the augmentation parameters (augment.h). 64-bit splitmix-seeded xoshiro256**:
// fast, and the same sequence on every platform and compiler (no std:: distribution, whose output
// is the standard library's choice), so a seed names the same draws everywhere.
//
// Header-only and torch-free: a draw is a few instructions, inlined where it is made.
#pragma once

#include <cstdint>

namespace xlaunch {

namespace detail {

// splitmix64 (Steele, Lea, Flood 2014): advances the state by the golden gamma and mixes it; the
// seeding that xoshiro's authors recommend.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace detail

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) {
    for (uint64_t& s : s_) s = detail::splitmix64(seed);
  }

  // xoshiro256** 1.0 (Blackman, Vigna 2018).
  uint64_t next() {
    const uint64_t result = detail::rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = detail::rotl(s_[3], 45);
    return result;
  }

  // Uniform in [low, high), a double with 53 random bits: low + (high - low) * u, as numpy's
  // Generator.uniform and torch's Uniform compute it (so low == high gives exactly low).
  double uniform(double low, double high) {
    const double u = static_cast<double>(next() >> 11) * 0x1.0p-53;
    return low + (high - low) * u;
  }

 private:
  uint64_t s_[4];
};

// A seed derived from `seed` and `value` (a pure function): splitmix64 of the seed, xor the value,
// splitmix64 again. For one seed the values give distinct results (splitmix64 is a bijection),
// and nearby seeds (rank 0, 1, ...) give unrelated sets. Chain it to key a seed by several
// values: mix_seed(mix_seed(seed, epoch), id).
inline uint64_t mix_seed(uint64_t seed, uint64_t value) {
  uint64_t mixed = detail::splitmix64(seed);
  uint64_t state = mixed ^ value;
  return detail::splitmix64(state);
}

}  // namespace xlaunch
