#include "rank_status.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "private_files.h"

namespace xlaunch::launcher {

bool write_rank_status(const std::string& dir, const RankStatus& s, std::string* why) {
  const int fd = files::open_private_dir(dir, why);
  if (fd < 0) return false;
  const std::string text = std::to_string(s.rank) + ' ' + (s.signaled ? "1" : "0") + ' ' + std::to_string(s.code) +
                           ' ' + std::to_string(s.end_ns) + '\n';
  const bool ok = files::write_private_file(fd, "rank-" + std::to_string(s.rank), text, why);
  close(fd);
  return ok;
}

std::vector<RankStatus> read_rank_statuses(const std::string& dir) {
  std::vector<RankStatus> out;
  std::string why;
  const int fd = files::open_private_dir(dir, &why);
  if (fd < 0) return out;
  DIR* d = fdopendir(dup(fd));
  while (dirent* e = d ? readdir(d) : nullptr) {
    const std::string name = e->d_name;
    if (name.rfind("rank-", 0) != 0) continue;
    const auto text = files::read_private_file(fd, name);
    if (!text) continue;
    std::istringstream in(*text);
    RankStatus s;
    int signaled = 0;
    if (in >> s.rank >> signaled >> s.code >> s.end_ns && name == "rank-" + std::to_string(s.rank)) {
      s.signaled = signaled != 0;
      out.push_back(s);
    }
  }
  if (d) closedir(d);
  close(fd);
  std::sort(out.begin(), out.end(), [](const RankStatus& a, const RankStatus& b) { return a.rank < b.rank; });
  return out;
}

std::string describe(const RankStatus& s) {
  if (!s.signaled) return "exited with code " + std::to_string(s.code);
  const char* abbrev = sigabbrev_np(s.code);
  return "was killed by signal " + std::to_string(s.code) + (abbrev ? " (SIG" + std::string(abbrev) + ")" : "");
}

std::optional<JobVerdict> read_verdict(const std::string& dir) {
  std::string why;
  const int fd = files::open_private_dir(dir, &why);
  if (fd < 0) return std::nullopt;
  const std::string text = files::read_private_file(fd, "verdict").value_or("");
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
