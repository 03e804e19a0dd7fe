// What the config tests share: the error a text makes, and a substring check.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "xlaunch/config/config_error.h"
#include "xlaunch/config/config_io.h"

namespace xlaunch::test {

// The ConfigError that parsing `text` throws; fails the test when none is thrown.
inline config::ConfigErrorInfo error_of(const std::string& text, std::optional<int> gpus = std::nullopt) {
  try {
    config::parse_config(text, "test.yaml", gpus);
  } catch (const config::ConfigError& e) {
    return e.info();
  }
  ADD_FAILURE() << "no ConfigError for:\n" << text;
  return {};
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace xlaunch::test
