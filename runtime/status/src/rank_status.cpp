#include "xlaunch/status/rank_status.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <ctime>
#include <sstream>

#include "xlaunch/status/private_files.h"

namespace xlaunch::status {
namespace {

constexpr const char* kPrefix = "rank-";
constexpr const char* kStartPrefix = "started-";
constexpr const char* kAgentPrefix = "agent-";

std::string agent_file(const std::string& host) {
  std::string name = host;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  return kAgentPrefix + name;
}

std::string file_name(int rank) { return kPrefix + std::to_string(rank); }

std::string this_host() {
  char name[HOST_NAME_MAX + 1] = {0};
  return gethostname(name, sizeof name - 1) == 0 && name[0] ? name : "unknown-host";
}

// Writes `text` as dir/name (private_files.h).
bool write_in(const std::string& dir, const std::string& name, const std::string& text, std::string* why) {
  const int fd = files::open_private_dir(dir, why);
  if (fd < 0) return false;
  const bool ok = files::write_private_file(fd, name, text, why);
  close(fd);
  return ok;
}

// parse(text, name, &out) for every file of dir whose name starts with prefix; out sorted by rank.
template <typename T, typename Parse, typename Less>
std::vector<T> read_each(const std::string& dir, const char* prefix, Parse parse, Less less) {
  std::vector<T> out;
  std::string why;
  const int fd = files::open_private_dir(dir, &why);
  if (fd < 0) return out;
  for (const std::string& name : files::list_private_dir(fd)) {
    if (name.rfind(prefix, 0) != 0) continue;
    const auto text = files::read_private_file(fd, name);
    T item;
    if (text && parse(*text, name, &item)) out.push_back(item);
  }
  close(fd);
  std::sort(out.begin(), out.end(), less);
  return out;
}

constexpr auto by_rank = [](const auto& a, const auto& b) { return a.rank < b.rank; };

}  // namespace

int64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

bool write_rank_status(const std::string& dir, const RankStatus& s, std::string* why) {
  const std::string host = s.host.empty() ? this_host() : s.host;
  const std::string text = std::to_string(s.rank) + ' ' + (s.signaled ? "1" : "0") + ' ' + std::to_string(s.code) +
                           ' ' + std::to_string(s.end_ns) + ' ' + host + '\n';
  return write_in(dir, file_name(s.rank), text, why);
}

std::vector<RankStatus> read_rank_statuses(const std::string& dir) {
  return read_each<RankStatus>(dir, kPrefix, [](const std::string& text, const std::string& name, RankStatus* s) {
    std::istringstream in(text);
    int signaled = 0;
    if (!(in >> s->rank >> signaled >> s->code >> s->end_ns) || name != file_name(s->rank)) return false;
    s->signaled = signaled != 0;
    in >> s->host;  // absent in a status written without it
    return true;
  }, by_rank);
}

bool write_rank_start(const std::string& dir, const RankStart& s, std::string* why) {
  const std::string text =
      std::to_string(s.rank) + ' ' + std::to_string(s.start_ns) + ' ' + (s.host.empty() ? this_host() : s.host) + '\n';
  return write_in(dir, kStartPrefix + std::to_string(s.rank), text, why);
}

std::vector<RankStart> read_rank_starts(const std::string& dir) {
  return read_each<RankStart>(dir, kStartPrefix, [](const std::string& text, const std::string& name, RankStart* s) {
    std::istringstream in(text);
    return in >> s->rank >> s->start_ns >> s->host && name == kStartPrefix + std::to_string(s->rank);
  }, by_rank);
}

bool write_agent_report(const std::string& dir, const AgentReport& a, std::string* why) {
  std::string said = a.said;
  if (said.size() > kAgentSaidBytes) {  // the last whole lines that fit
    said = said.substr(said.size() - kAgentSaidBytes);
    const size_t nl = said.find('\n');
    if (nl != std::string::npos && nl + 1 < said.size()) said = said.substr(nl + 1);
  }
  const std::string text = std::to_string(a.code) + ' ' + std::to_string(a.end_ns) + ' ' + a.host + '\n' + said;
  return write_in(dir, agent_file(a.host), text, why);
}

std::vector<AgentReport> read_agent_reports(const std::string& dir) {
  return read_each<AgentReport>(dir, kAgentPrefix, [](const std::string& text, const std::string& name, AgentReport* a) {
    const size_t nl = text.find('\n');
    std::istringstream in(text.substr(0, nl));
    if (!(in >> a->code >> a->end_ns >> a->host) || name != agent_file(a->host)) return false;
    a->said = nl == std::string::npos ? "" : text.substr(nl + 1);
    return true;
  }, [](const AgentReport& x, const AgentReport& y) { return x.host < y.host; });
}

}  // namespace xlaunch::status
