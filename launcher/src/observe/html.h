// Text placed into report.html (timeline.h): escaped, so that a host name, an advice or a tag the
// user logged shows as written and is never read as markup, in an element or in an attribute.
#pragma once

#include <string>

namespace xlaunch::launcher {

inline std::string html_escaped(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '<') o += "&lt;";
    else if (ch == '>') o += "&gt;";
    else if (ch == '&') o += "&amp;";
    else if (ch == '"') o += "&quot;";
    else o += ch;
  }
  return o;
}

}  // namespace xlaunch::launcher
