// docs/env-vars.md lists exactly the variables declared in env_vars.h, with their defaults, and
// the typed readers reject malformed values with a UsageError naming the variable. The config
// reference's ddp.comm_hook row lists exactly the hooks of comm_hooks.h.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "xlaunch/comm_hooks.h"
#include "xlaunch/env_vars.h"

namespace env = xlaunch::env;

namespace {
std::string read_file(const char* path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

TEST(EnvContract, DocsListExactlyTheDeclaredVariables) {
  const std::string doc = read_file(XLAUNCH_ENV_DOC);
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

TEST(EnvContract, ConfigReferenceListsExactlyTheCommHooks) {
  const std::string doc = read_file(XLAUNCH_CONFIG_DOC);
  std::smatch row;
  ASSERT_TRUE(std::regex_search(doc, row, std::regex(R"(\| `ddp\.comm_hook` \| ([^|]*) \|)"))) << XLAUNCH_CONFIG_DOC;
  std::vector<std::string> documented;
  const std::string values = row[1];
  const std::regex name("`([a-z0-9_]+)`");
  for (auto it = std::sregex_iterator(values.begin(), values.end(), name); it != std::sregex_iterator(); ++it)
    documented.push_back((*it)[1]);
  EXPECT_EQ(documented, xlaunch::comm_hook_names());
}
