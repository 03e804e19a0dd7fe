#include "rank_status.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace xlaunch::launcher {

void write_rank_status(const std::string& dir, const RankStatus& s) {
  const std::string path = dir + "/rank-" + std::to_string(s.rank);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << s.rank << ' ' << (s.signaled ? 1 : 0) << ' ' << s.code << ' ' << s.end_ns << '\n';
  }
  std::rename(tmp.c_str(), path.c_str());
}

std::vector<RankStatus> read_rank_statuses(const std::string& dir) {
  std::vector<RankStatus> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("rank-", 0) != 0 || name.find(".tmp") != std::string::npos) continue;
    std::ifstream in(dir + "/" + name);
    RankStatus s;
    int signaled = 0;
    if (in >> s.rank >> signaled >> s.code >> s.end_ns) {
      s.signaled = signaled != 0;
      out.push_back(s);
    }
  }
  closedir(d);
  std::sort(out.begin(), out.end(), [](const RankStatus& a, const RankStatus& b) { return a.rank < b.rank; });
  return out;
}

std::string describe(const RankStatus& s) {
  if (!s.signaled) return "exited with code " + std::to_string(s.code);
  const char* abbrev = sigabbrev_np(s.code);
  return "was killed by signal " + std::to_string(s.code) + (abbrev ? " (SIG" + std::string(abbrev) + ")" : "");
}

std::optional<JobVerdict> read_verdict(const std::string& dir) {
  const std::string path = dir + "/verdict";
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  std::string text;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && st.st_size < 65536) {
    text.resize(static_cast<size_t>(st.st_size));
    if (read(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) text.clear();
  }
  close(fd);
  std::istringstream in(text);
  JobVerdict v;
  if (!(in >> v.exit_code >> v.rank)) return std::nullopt;
  in.ignore(1);
  std::getline(in, v.message);
  if (v.message.empty()) return std::nullopt;
  return v;
}

JobOutcome summarize_job(int wait_status, const std::vector<RankStatus>& ranks, int num_processes,
                         const std::optional<JobVerdict>& verdict) {
  if (verdict) return {verdict->exit_code, verdict->rank, verdict->message};
  std::vector<RankStatus> failed;
  for (const auto& r : ranks)
    if (r.signaled || r.code != 0) failed.push_back(r);
  std::stable_sort(failed.begin(), failed.end(),
                   [](const RankStatus& a, const RankStatus& b) { return a.end_ns < b.end_ns; });
  const int mpirun_code = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status)
                          : WIFSIGNALED(wait_status) ? 128 + WTERMSIG(wait_status) : 1;
  JobOutcome o;
  if (!failed.empty()) {
    const RankStatus& first = failed.front();
    o.exit_code = first.signaled ? 128 + first.code : first.code;
    o.rank = first.rank;
    o.message = "rank " + std::to_string(first.rank) + " " + describe(first);
    for (size_t i = 1; i < failed.size(); ++i)
      o.message += (i == 1 ? "; after that, " : ", ") + std::string("rank ") + std::to_string(failed[i].rank) +
                   " " + describe(failed[i]);
    return o;
  }
  if (mpirun_code == 0 && static_cast<int>(ranks.size()) >= num_processes) return o;
  o.exit_code = mpirun_code == 0 ? 1 : mpirun_code;
  o.message = "mpirun " + (WIFSIGNALED(wait_status) ? "was killed by signal " + std::to_string(WTERMSIG(wait_status))
                                                    : "exited with code " + std::to_string(mpirun_code)) +
              " and " + std::to_string(ranks.size()) + " of " + std::to_string(num_processes) +
              " ranks reported how they ended (the others did not start, or ran on machines whose status files are "
              "not visible here); see mpirun's message above";
  return o;
}

}  // namespace xlaunch::launcher
