#include "launch/startup.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <sstream>

#include "launch/lifeline.h"
#include "xlaunch/status/flight_recorder.h"
#include "xlaunch/status/rank_status.h"

namespace xlaunch::launcher {

namespace {

constexpr int64_t kNsPerS = 1000000000;
constexpr int64_t kPendingForNs = 5 * kNsPerS;  // a connection has this long to send its line
constexpr size_t kMaxLine = 512;
constexpr const char* kHello = "xlaunch-hello";

// Connects to host:port within timeout_ms (lifeline.h) and writes `line`; true when all of it was taken.
bool send_to(const std::string& host, int port, const std::string& line, int timeout_ms) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  // A few dozen bytes fit in any socket's send buffer: one send takes them whole or fails.
  const bool ok = connect_within(fd, host, port, timeout_ms) == 0 &&
                  send(fd, line.data(), line.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(line.size());
  close(fd);
  return ok;
}

}  // namespace

int startup_deadline_s(int startup_timeout_s, int timeout_s) {
  if (startup_timeout_s <= 0) return 0;
  return timeout_s > 0 ? std::min(startup_timeout_s, timeout_s * 6) : startup_timeout_s;
}

std::string hello_tag(const std::string& status_dir) {
  std::string d = status_dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const size_t slash = d.rfind('/');
  return slash == std::string::npos ? d : d.substr(slash + 1);
}

std::string hello_line(const std::string& tag, int rank, const std::string& host) {
  return std::string(kHello) + ' ' + tag + ' ' + std::to_string(rank) + ' ' + host + '\n';
}

std::optional<int> parse_hello(const std::string& line, const std::string& tag) {
  std::istringstream in(line);
  std::string word, got_tag, rank_text;
  if (!(in >> word >> got_tag >> rank_text) || word != kHello || got_tag != tag || tag.empty()) return std::nullopt;
  if (rank_text.empty() || rank_text.size() > 9 || rank_text.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::stoi(rank_text);
}

bool send_hello(const std::vector<std::pair<std::string, int>>& hosts, int port, const std::string& line,
                int timeout_ms, int retry_for_s) {
  const int64_t until = status::realtime_ns() + int64_t{retry_for_s} * kNsPerS;
  for (int pause_s = 1;; pause_s *= 2) {
    for (const auto& h : hosts)
      if (send_to(h.first, port, line, timeout_ms)) return true;
    if (hosts.empty() || status::realtime_ns() + pause_s * kNsPerS > until) return false;
    sleep(static_cast<unsigned>(pause_s));
  }
}

HelloListener::HelloListener() {
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof sa;
  if (fd_ < 0 || bind(fd_, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0 || listen(fd_, SOMAXCONN) != 0 ||
      getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    std::fprintf(stderr, "xlaunch: warning: no TCP socket for the ranks' hellos (%s); only the ranks whose "
                         "started-<R> file reaches the status directory count as started\n", std::strerror(errno));
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    return;
  }
  port_ = ntohs(sa.sin_port);
}

HelloListener::~HelloListener() {
  drop_pending();
  if (fd_ >= 0) close(fd_);
}

void HelloListener::drop_pending() {
  for (const auto& p : pending_) close(p.fd);
  pending_.clear();
}

void HelloListener::poll(const std::string& tag, std::set<int>* ranks) {
  if (fd_ < 0) return;
  for (int c; (c = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
    if (pending_.size() >= kMaxPending) {  // a flood of silent connections: the oldest goes
      close(pending_.front().fd);
      pending_.erase(pending_.begin());
    }
    pending_.push_back({c, status::realtime_ns(), ""});
  }
  const int64_t now = status::realtime_ns();
  std::vector<Pending> keep;
  for (auto& p : pending_) {
    char buf[256];
    ssize_t n;
    while ((n = recv(p.fd, buf, sizeof buf, 0)) > 0 && p.got.size() <= kMaxLine) p.got.append(buf, static_cast<size_t>(n));
    const size_t eol = p.got.find('\n');
    if (eol != std::string::npos) {
      if (const auto r = parse_hello(p.got.substr(0, eol), tag)) ranks->insert(*r);
      close(p.fd);
    } else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) || p.got.size() > kMaxLine ||
               now - p.since_ns > kPendingForNs) {
      close(p.fd);  // closed without a line, broken, too long, or too slow
    } else {
      keep.push_back(p);
    }
  }
  pending_ = std::move(keep);
}

StartupDeadline::StartupDeadline(int deadline_s, int num_processes, int64_t start_ns)
    : deadline_s_(deadline_s), num_processes_(num_processes), start_ns_(start_ns) {}

void StartupDeadline::seen(int rank) {
  if (rank >= 0 && rank < num_processes_) seen_.insert(rank);
}

bool StartupDeadline::expired(int64_t now_ns) {
  if (fired_ || deadline_s_ <= 0 || any_seen() || now_ns - start_ns_ < deadline_s_ * kNsPerS) return false;
  fired_ = true;
  return true;
}

std::vector<int> StartupDeadline::missing() const {
  std::vector<int> out;
  for (int r = 0; r < num_processes_; ++r)
    if (!seen_.count(r)) out.push_back(r);
  return out;
}

std::string never_started_text(const std::vector<int>& missing, const std::vector<std::string>& rank_hosts) {
  const bool placed = std::all_of(missing.begin(), missing.end(),
                                  [&](int r) { return r >= 0 && static_cast<size_t>(r) < rank_hosts.size(); });
  if (!placed || missing.empty()) return status::rank_list(missing);
  std::vector<std::pair<std::string, std::vector<int>>> machines;  // in rank order
  for (int r : missing) {
    const std::string& h = rank_hosts[static_cast<size_t>(r)];
    auto it = std::find_if(machines.begin(), machines.end(), [&](const auto& m) { return m.first == h; });
    if (it == machines.end()) machines.push_back({h, {r}});
    else it->second.push_back(r);
  }
  std::string s;
  for (const auto& [host, rs] : machines) s += (s.empty() ? "machine " : ", machine ") + host + " (" + status::rank_list(rs) + ")";
  return s;
}

}  // namespace xlaunch::launcher
