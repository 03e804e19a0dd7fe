// What a call's UsageError says, for tests that check the message names the cause and the fix.
#pragma once

#include <string>

#include "xlaunch/error.h"

namespace xlaunch::test {

// f()'s UsageError's what(), or "(no UsageError)" when f() returns (so an expectation on the
// message fails and shows why).
template <typename F>
std::string usage_error_of(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no UsageError)";
}

}  // namespace xlaunch::test
