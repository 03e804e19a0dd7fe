// Settings only Accelerate has. A file that holds them still loads: each is reported by name as not
// supported by xlaunch, and ignored.
#pragma once

#include <string>

namespace xlaunch::config::detail {

// True for a top-level key of Accelerate's default_config.yaml that xlaunch does not support.
bool is_accelerate_only_key(const std::string& key);

}  // namespace xlaunch::config::detail
