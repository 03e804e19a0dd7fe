#include "xlaunch/status/rank_status.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <sstream>

#include "xlaunch/status/private_files.h"

namespace xlaunch::status {
namespace {

constexpr const char* kPrefix = "rank-";

std::string file_name(int rank) { return kPrefix + std::to_string(rank); }

}  // namespace

bool write_rank_status(const std::string& dir, const RankStatus& s, std::string* why) {
  const int fd = files::open_private_dir(dir, why);
  if (fd < 0) return false;
  std::string host = s.host;
  if (host.empty()) {
    char name[HOST_NAME_MAX + 1] = {0};
    host = gethostname(name, sizeof name - 1) == 0 && name[0] ? name : "unknown-host";
  }
  const std::string text = std::to_string(s.rank) + ' ' + (s.signaled ? "1" : "0") + ' ' + std::to_string(s.code) +
                           ' ' + std::to_string(s.end_ns) + ' ' + host + '\n';
  const bool ok = files::write_private_file(fd, file_name(s.rank), text, why);
  close(fd);
  return ok;
}

std::vector<RankStatus> read_rank_statuses(const std::string& dir) {
  std::vector<RankStatus> out;
  std::string why;
  const int fd = files::open_private_dir(dir, &why);
  if (fd < 0) return out;
  for (const std::string& name : files::list_private_dir(fd)) {
    if (name.rfind(kPrefix, 0) != 0) continue;
    const auto text = files::read_private_file(fd, name);
    if (!text) continue;
    std::istringstream in(*text);
    RankStatus s;
    int signaled = 0;
    if (in >> s.rank >> signaled >> s.code >> s.end_ns && name == file_name(s.rank)) {
      s.signaled = signaled != 0;
      in >> s.host;  // absent in a status written without it
      out.push_back(s);
    }
  }
  close(fd);
  std::sort(out.begin(), out.end(), [](const RankStatus& a, const RankStatus& b) { return a.rank < b.rank; });
  return out;
}

}  // namespace xlaunch::status
