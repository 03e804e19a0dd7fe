// Where the config file comes from: --config_file, else XLAUNCH_CONFIG_FILE, else
// ${XDG_CONFIG_HOME:-$HOME/.config}/xlaunch/default_config.yaml.
#include <gtest/gtest.h>

#include <map>

#include "xlaunch/config/config_path.h"

using namespace xlaunch::config;

namespace {
EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}
}  // namespace

TEST(ConfigPath, CommandLineWins) {
  const auto l = resolve_config_path("/a.yaml", env_of({{"XLAUNCH_CONFIG_FILE", "/b.yaml"}, {"HOME", "/h"}}));
  EXPECT_EQ(l.path, "/a.yaml");
  EXPECT_EQ(l.origin, ConfigOrigin::CommandLine);
}

TEST(ConfigPath, EnvVarBeforeDefault) {
  const auto l = resolve_config_path("", env_of({{"XLAUNCH_CONFIG_FILE", "/b.yaml"}, {"HOME", "/h"}}));
  EXPECT_EQ(l.path, "/b.yaml");
  EXPECT_EQ(l.origin, ConfigOrigin::EnvVar);
}

TEST(ConfigPath, XdgConfigHomeBeforeHome) {
  const auto l = resolve_config_path("", env_of({{"XDG_CONFIG_HOME", "/x"}, {"HOME", "/h"}}));
  EXPECT_EQ(l.path, "/x/xlaunch/default_config.yaml");
  EXPECT_EQ(l.origin, ConfigOrigin::DefaultLocation);
}

TEST(ConfigPath, HomeDotConfig) {
  const auto l = resolve_config_path("", env_of({{"HOME", "/h"}, {"XLAUNCH_CONFIG_FILE", ""}, {"XDG_CONFIG_HOME", ""}}));
  EXPECT_EQ(l.path, "/h/.config/xlaunch/default_config.yaml");
  EXPECT_EQ(l.origin, ConfigOrigin::DefaultLocation);
}

TEST(ConfigPath, NothingAtAll) {
  const auto l = resolve_config_path("", env_of({}));
  EXPECT_EQ(l.path, "");
  EXPECT_EQ(l.origin, ConfigOrigin::None);
}

TEST(AccelerateConfigPath, HfHomeThenXdgCacheHomeThenHome) {
  EXPECT_EQ(accelerate_default_config_path(env_of({{"HF_HOME", "/hf"}, {"XDG_CACHE_HOME", "/c"}, {"HOME", "/h"}})),
            "/hf/accelerate/default_config.yaml");
  EXPECT_EQ(accelerate_default_config_path(env_of({{"HF_HOME", ""}, {"XDG_CACHE_HOME", "/c"}, {"HOME", "/h"}})),
            "/c/huggingface/accelerate/default_config.yaml");
  EXPECT_EQ(accelerate_default_config_path(env_of({{"HOME", "/h"}})),
            "/h/.cache/huggingface/accelerate/default_config.yaml");
  EXPECT_EQ(accelerate_default_config_path(env_of({})), "");
}
