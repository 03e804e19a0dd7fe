#include "progress.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <fstream>

namespace xlaunch::examples {
namespace {

constexpr int kBarWidth = 24;

std::string duration(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

// Whether output ends up on a terminal. Under mpirun a rank's stdout is always a pseudo-terminal
// that mpirun copies to its own stdout, so isatty() alone says yes even for `xlaunch run ... >log`.
// So when an ancestor is mpirun (or orterun), ask where mpirun's own stdout goes (Linux /proc).
bool output_is_terminal(FILE* out) {
  if (!isatty(fileno(out))) return false;
  for (pid_t pid = getppid(); pid > 1;) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return true;
    const size_t open = line.find('('), close = line.rfind(')');
    const std::string comm = line.substr(open + 1, close - open - 1);
    if (comm == "mpirun" || comm == "orterun" || comm == "mpiexec") {
      char target[PATH_MAX];
      const ssize_t n = readlink(("/proc/" + std::to_string(pid) + "/fd/1").c_str(), target, sizeof target - 1);
      const std::string where(target, n > 0 ? static_cast<size_t>(n) : 0);
      return where.rfind("/dev/pts/", 0) == 0 || where.rfind("/dev/tty", 0) == 0;
    }
    pid = static_cast<pid_t>(std::atol(line.c_str() + close + 4));  // ") S ppid"
  }
  return true;
}

}  // namespace

ProgressBar::ProgressBar(std::string label, int64_t total, bool enabled, FILE* out)
    : ProgressBar(std::move(label), total, enabled, output_is_terminal(out), out) {}

ProgressBar::ProgressBar(std::string label, int64_t total, bool enabled, bool interactive, FILE* out)
    : label_(std::move(label)), total_(std::max<int64_t>(total, 1)), enabled_(enabled), interactive_(interactive),
      out_(out) {}

std::string ProgressBar::format(const std::string& label, int64_t done, int64_t total, double seconds, double loss) {
  const double frac = std::clamp(static_cast<double>(done) / static_cast<double>(std::max<int64_t>(total, 1)), 0.0, 1.0);
  const int filled = static_cast<int>(frac * kBarWidth);
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
  const double left = rate > 0 ? static_cast<double>(total - std::min(done, total)) / rate : 0.0;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s [%s%s] %3d%% %lld/%lld  %.0f samples/s  loss %.4f  %s elapsed, %s left",
                label.c_str(), std::string(static_cast<size_t>(filled), '#').c_str(),
                std::string(static_cast<size_t>(kBarWidth - filled), '.').c_str(), static_cast<int>(frac * 100),
                static_cast<long long>(done), static_cast<long long>(total), rate, loss, duration(seconds).c_str(),
                duration(left).c_str());
  return buf;
}

void ProgressBar::update(int64_t done, const std::function<double()>& loss) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (interactive_) {
    if (now - last_draw_ < std::chrono::milliseconds(100)) return;
  } else {
    const int tenth = static_cast<int>(10 * done / total_);
    if (tenth <= last_tenth_ || tenth >= 10) return;  // the last tenth is finish()'s line
    last_tenth_ = tenth;
  }
  last_draw_ = now;
  draw(done, loss(), false);
}

void ProgressBar::finish(int64_t done, double loss) {
  if (enabled_) draw(done, loss, true);
}

void ProgressBar::draw(int64_t done, double loss, bool final_line) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string line = format(label_, done, total_, seconds, loss);
  if (interactive_) {
    // Pad over the previous, possibly longer, line: \r only moves the cursor.
    const size_t width = line.size();
    if (width < last_width_) line.append(last_width_ - width, ' ');
    last_width_ = width;
    std::fprintf(out_, "\r%s%s", line.c_str(), final_line ? "\n" : "");
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

}  // namespace xlaunch::examples
