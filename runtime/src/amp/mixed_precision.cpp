#include "xlaunch/mixed_precision.h"

#include "xlaunch/env_vars.h"

namespace xlaunch {

MixedPrecision mixed_precision_from_env() {
  return parse_mixed_precision(env::get_string(env::kMixedPrecision), env::kMixedPrecision.name);
}

}  // namespace xlaunch
