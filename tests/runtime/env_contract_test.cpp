// docs/env-vars.md lists exactly the variables declared in env_vars.h, with their defaults, and
// the typed readers reject malformed values with a UsageError naming the variable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "xlaunch/env_vars.h"

namespace env = xlaunch::env;

TEST(EnvContract, DocsListExactlyTheDeclaredVariables) {
  std::ifstream in(XLAUNCH_ENV_DOC);
  ASSERT_TRUE(in) << XLAUNCH_ENV_DOC;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  std::set<std::string> documented;
  const std::regex row(R"(\| `(XLAUNCH_[A-Z_]+)` \| \w+ \| ([^|]*) \|)");
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), row); it != std::sregex_iterator(); ++it) {
    documented.insert((*it)[1]);
    for (const env::Var* v : env::kAll) {
      if ((*it)[1] != v->name) continue;
      const std::string def = (*it)[2];
      const std::string want = *v->default_value ? "`" + std::string(v->default_value) + "`" : "(empty)";
      EXPECT_EQ(def.substr(0, def.find_last_not_of(' ') + 1), want) << v->name;
    }
  }
  std::set<std::string> declared;
  for (const env::Var* v : env::kAll) declared.insert(v->name);
  EXPECT_EQ(documented, declared);
}

TEST(EnvContract, TypedReaders) {
  setenv("XLAUNCH_GRADIENT_ACCUMULATION_STEPS", "4", 1);
  EXPECT_EQ(env::get_int(env::kGradAccumSteps), 4);
  setenv("XLAUNCH_GRADIENT_ACCUMULATION_STEPS", "four", 1);
  try {
    env::get_int(env::kGradAccumSteps);
    FAIL();
  } catch (const xlaunch::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("XLAUNCH_GRADIENT_ACCUMULATION_STEPS='four' is not an integer"),
              std::string::npos);
  }
  unsetenv("XLAUNCH_GRADIENT_ACCUMULATION_STEPS");
  EXPECT_EQ(env::get_int(env::kGradAccumSteps), 1);
  setenv("XLAUNCH_BROADCAST_BUFFERS", "maybe", 1);
  EXPECT_THROW(env::get_bool(env::kBroadcastBuffers), xlaunch::UsageError);
  setenv("XLAUNCH_BROADCAST_BUFFERS", "0", 1);
  EXPECT_FALSE(env::get_bool(env::kBroadcastBuffers));
  unsetenv("XLAUNCH_BROADCAST_BUFFERS");
  EXPECT_TRUE(env::get_bool(env::kBroadcastBuffers));
  setenv("XLAUNCH_BUCKET_CAP_MB", "12.5", 1);
  EXPECT_DOUBLE_EQ(env::get_float(env::kBucketCapMb), 12.5);
  unsetenv("XLAUNCH_BUCKET_CAP_MB");
}
