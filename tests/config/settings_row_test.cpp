// One row of the settings table makes a setting everywhere. This test is compiled with
// XLAUNCH_SETTINGS_TEST_ROW, which adds xlaunch/settings.h's test-only row (test_only_setting,
// XLAUNCH_TEST_ONLY_SETTING, --test_only_setting, default 7, at least 1), together with its own
// copies of the sources that expand the table (config/, the options, the launch plan, from_env):
// nothing else is written for the setting, and it is a key of the file with its check, an option
// of `xlaunch run`, a variable the launch exports and the user's environment sets, a field
// AcceleratorOptions::from_env() reads, and a row of the config reference.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "cli/overrides.h"
#include "launch/launch_plan.h"
#include "xlaunch/accelerator_options.h"
#include "xlaunch/config/config_error.h"
#include "xlaunch/config/config_io.h"
#include "xlaunch/config/setting.h"

#ifndef XLAUNCH_SETTINGS_TEST_ROW
#error "settings_row_test is built with XLAUNCH_SETTINGS_TEST_ROW (tests/config/CMakeLists.txt)"
#endif

using namespace xlaunch::config;
using xlaunch::launcher::Overrides;

TEST(SettingsRow, TheFileReadsChecksAndWritesIt) {
  EXPECT_EQ(LaunchConfig{}.test_only_setting, 7);
  const LoadedConfig l = parse_config("test_only_setting: 9\n", "t.yaml");
  EXPECT_EQ(l.config.test_only_setting, 9);
  EXPECT_NE(to_yaml(l.config).find("\ntest_only_setting: 9\n"), std::string::npos) << to_yaml(l.config);
  try {
    parse_config("test_only_setting: 0\n", "t.yaml");
    ADD_FAILURE() << "0 accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.info().key, "test_only_setting");
    EXPECT_EQ(e.info().line, 1);
    EXPECT_EQ(e.info().allowed, "an integer >= 1");
  }
  EXPECT_NE(settings_markdown().find("| `test_only_setting` | int | `7` | an integer >= 1 | `--test_only_setting` | "
                                     "`XLAUNCH_TEST_ONLY_SETTING` |"),
            std::string::npos);
}

TEST(SettingsRow, TheCommandLineAndTheEnvironmentSetItAndTheLaunchExportsIt) {
  CLI::App app;
  Overrides o;
  xlaunch::launcher::add_override_options(&app, o);
  app.parse("--test_only_setting 5", false);
  LaunchConfig c;
  EXPECT_EQ(xlaunch::launcher::apply_overrides(c, o, 0), std::vector<std::string>{"test_only_setting"});
  EXPECT_EQ(c.test_only_setting, 5);
  const auto exported = xlaunch::launcher::exported_env(c, {});
  const std::map<std::string, std::string> env(exported.begin(), exported.end());
  EXPECT_EQ(env.at("XLAUNCH_TEST_ONLY_SETTING"), "5");

  LaunchConfig from_user;
  EXPECT_EQ(apply_environment(from_user, {{"XLAUNCH_TEST_ONLY_SETTING", "11"}}),
            std::vector<std::string>{"test_only_setting"});
  EXPECT_EQ(from_user.test_only_setting, 11);
}

TEST(SettingsRow, FromEnvReadsItIntoItsAcceleratorOptionsField) {
  EXPECT_EQ(xlaunch::AcceleratorOptions{}.test_only_setting, 7);
  setenv("XLAUNCH_TEST_ONLY_SETTING", "5", 1);
  EXPECT_EQ(xlaunch::AcceleratorOptions::from_env().test_only_setting, 5);
  unsetenv("XLAUNCH_TEST_ONLY_SETTING");
  EXPECT_EQ(xlaunch::AcceleratorOptions::from_env().test_only_setting, 7);
}
