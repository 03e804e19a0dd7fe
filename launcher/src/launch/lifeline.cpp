#include "launch/lifeline.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace xlaunch::launcher {

std::vector<std::pair<std::string, int>> tcp_endpoints(const std::string& uri) {
  std::vector<std::pair<std::string, int>> out;
  size_t at = 0;
  while ((at = uri.find("tcp://", at)) != std::string::npos) {
    at += 6;
    const size_t end = std::min(uri.find(';', at), uri.size());
    const std::string part = uri.substr(at, end - at);  // "10.0.0.1,10.1.0.1:5000"
    const size_t colon = part.rfind(':');
    if (colon == std::string::npos) continue;
    int port = 0;
    try {
      port = std::stoi(part.substr(colon + 1));
    } catch (const std::exception&) {
      continue;
    }
    if (port <= 0 || port > 65535) continue;
    size_t from = 0;
    while (from < colon) {
      const size_t comma = std::min(part.find(',', from), colon);
      const std::string host = part.substr(from, comma - from);
      in_addr a{};
      if (inet_pton(AF_INET, host.c_str(), &a) == 1) out.emplace_back(host, port);
      from = comma + 1;
    }
  }
  return out;
}

int connect_within(int fd, const std::string& host, int port, int timeout_ms) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) return EINVAL;
  int err = connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    socklen_t len = sizeof err;
    if (poll(&p, 1, timeout_ms) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = ETIMEDOUT;
  }
  return err;
}

namespace {

Answer answer_of(const std::string& host, int port, int timeout_ms) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Answer::kAccepted;  // no socket here says nothing about the launcher
  const int err = connect_within(fd, host, port, timeout_ms);
  close(fd);
  return err == 0 ? Answer::kAccepted : err == ECONNREFUSED ? Answer::kRefused : Answer::kSilent;
}

}  // namespace

Answer check_launcher(const std::vector<std::pair<std::string, int>>& endpoints, int timeout_ms) {
  Answer out = Answer::kSilent;
  for (const auto& [host, port] : endpoints) {
    const Answer a = answer_of(host, port, timeout_ms);
    if (a == Answer::kAccepted) return a;
    if (a == Answer::kRefused) out = a;
  }
  return out;
}

int lost_after_s(int timeout_s) { return timeout_s <= 0 ? 600 : std::max(timeout_s, 10); }

bool LauncherSilence::lost(int64_t now_ns, Answer answer) {
  if (answer == Answer::kAccepted) {
    since_ns_ = 0;
    return false;
  }
  if (since_ns_ == 0) since_ns_ = now_ns;
  return answer == Answer::kRefused || now_ns - since_ns_ >= lost_after_ns_;
}

}  // namespace xlaunch::launcher
