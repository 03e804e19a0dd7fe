#include "observe/flight_report.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <vector>

#include "xlaunch/status/flight_recorder.h"
#include "xlaunch/status/rank_status.h"

namespace xlaunch::launcher {
namespace {

constexpr const char* kPrefix = "flight-recorder-";

// The table and the finding; false (and, when say_none, a line saying so) when no rank issued a
// collective.
bool print_table(FILE* out, const std::vector<status::RankFlight>& ranks, int64_t at_ns, bool say_none) {
  const std::string table = status::flight_table(ranks, at_ns);
  if (table.empty()) {
    if (say_none) std::fprintf(out, "xlaunch: no rank issued a collective\n");
    return false;
  }
  std::fprintf(out, "%s", table.c_str());
  const std::string finding = status::flight_finding(ranks, at_ns);
  if (!finding.empty()) std::fprintf(out, "xlaunch: %s\n", finding.c_str());
  return true;
}

// The newest flight-recorder-*.json in dir (by modification time); "" when there is none.
std::string newest_saved(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return "";
  std::string best;
  timespec best_time{};
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(kPrefix, 0) != 0 || name.size() < 5 || name.compare(name.size() - 5, 5, ".json") != 0) continue;
    struct stat st {};
    if (stat((dir + "/" + name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    const timespec t = st.st_mtim;
    if (best.empty() || t.tv_sec > best_time.tv_sec || (t.tv_sec == best_time.tv_sec && t.tv_nsec > best_time.tv_nsec)) {
      best = name;
      best_time = t;
    }
  }
  closedir(d);
  return best.empty() ? "" : dir + "/" + best;
}

}  // namespace

std::string flight_file_name(const std::string& run_id, int attempt) {
  return kPrefix + run_id + "-" + std::to_string(attempt) + ".json";
}

void report_flight(FILE* out, const std::string& status_dir, int world, const std::string& log_dir,
                   const std::string& run_id, int attempt) {
  const auto ranks = status::read_flight(status_dir, world);
  const int64_t now = status::realtime_ns();
  if (!print_table(out, ranks, now, false) || log_dir.empty()) return;
  const std::string path = log_dir + "/" + flight_file_name(run_id, attempt);
  const std::string tmp = path + ".tmp";
  bool saved;
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << status::flight_json(ranks, now);
    saved = static_cast<bool>(f.flush());
  }
  if (!saved || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::fprintf(out, "xlaunch: warning: the flight recorder could not be saved to %s\n", path.c_str());
    std::remove(tmp.c_str());
    return;
  }
  std::fprintf(out, "xlaunch: flight recorder saved: %s (`xlaunch debug %s` prints it again)\n", path.c_str(),
               log_dir.c_str());
}

int print_flight(FILE* out, const std::string& dir) {
  if (const int world = status::flight_world(dir); world > 0) {
    std::fprintf(out, "xlaunch debug: the progress boards of %d rank%s in %s, now\n", world, world == 1 ? "" : "s",
                 dir.c_str());
    print_table(out, status::read_flight(dir, world), status::realtime_ns(), true);
    return 0;
  }
  struct stat st {};
  const std::string file = stat(dir.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? dir : newest_saved(dir);
  if (!file.empty()) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    const auto saved = status::parse_flight_json(text.str());
    if (!saved) {
      std::fprintf(stderr, "xlaunch debug: %s is not a flight recorder xlaunch saved (its JSON does not parse)\n",
                   file.c_str());
      return 2;
    }
    const std::time_t t = static_cast<std::time_t>(saved->second / 1000000000);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
    std::fprintf(out, "xlaunch debug: %s, saved %s (times below are relative to then)\n", file.c_str(), when);
    print_table(out, saved->first, saved->second, true);
    return 0;
  }
  std::fprintf(stderr, "xlaunch debug: %s holds no progress boards (progress-<R>, a job's status directory while it "
                       "runs) and no %s*.json (a log_dir after a failed attempt)\n", dir.c_str(), kPrefix);
  return 2;
}

}  // namespace xlaunch::launcher
