// docs/config-reference.md's settings table is the one `xlaunch env --settings_table` prints from
// the settings table (xlaunch/settings.h): a row added, changed or removed there fails here until
// the page is regenerated.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "xlaunch/config/setting.h"

namespace {

const char* kBegin = "<!-- settings table: printed by `xlaunch env --settings_table`, checked by "
                     "tests/config/settings_doc_test.cpp -->\n";
const char* kEnd = "<!-- end of the settings table -->";

}  // namespace

TEST(SettingsDoc, TheConfigReferenceHoldsTheTableAsPrinted) {
  std::ifstream in(XLAUNCH_CONFIG_DOC);
  ASSERT_TRUE(in) << XLAUNCH_CONFIG_DOC;
  std::stringstream doc;
  doc << in.rdbuf();
  const std::string text = doc.str();
  const size_t begin = text.find(kBegin);
  ASSERT_NE(begin, std::string::npos) << "no settings table marker in " << XLAUNCH_CONFIG_DOC;
  const size_t from = begin + std::string(kBegin).size();
  const size_t end = text.find(kEnd, from);
  ASSERT_NE(end, std::string::npos) << "the settings table in " << XLAUNCH_CONFIG_DOC << " has no end marker";
  EXPECT_EQ(text.substr(from, end - from), xlaunch::config::settings_markdown())
      << "regenerate the table of " << XLAUNCH_CONFIG_DOC << " with `xlaunch env --settings_table`";
}

TEST(SettingsDoc, EveryVariableOfASettingIsInTheTable) {
  const std::string table = xlaunch::config::settings_markdown();
  for (const xlaunch::config::Setting& s : xlaunch::config::settings_table()) {
    EXPECT_NE(table.find("| `" + s.key + "` |"), std::string::npos) << s.key;
    if (s.var) EXPECT_NE(table.find(std::string("`") + s.var->name + "`"), std::string::npos) << s.key;
  }
}
