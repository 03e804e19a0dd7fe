// `xlaunch ARGS...` on a new pseudo-terminal, as a person at a terminal runs it: the session's
// foreground process, so the terminal's Ctrl-C (typed as "\x03") goes to its process group.
// XLAUNCH_BIN is the binary under test.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <string>
#include <vector>

class PtySession {
 public:
  // `xlaunch config`; env: "NAME=value" entries set for it (XLAUNCH_CPUINFO_FILE, ...).
  PtySession(const std::string& config_file, const std::string& home, const std::vector<std::string>& env = {})
      : PtySession({"config", "--config_file", config_file}, home, env) {}
  // `xlaunch ARGS...` on a new pseudo-terminal, with its own empty config home.
  PtySession(const std::vector<std::string>& args, const std::string& home, std::vector<std::string> env = {}) {
    std::vector<std::string> words{XLAUNCH_BIN};
    words.insert(words.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    pid_ = forkpty(&fd_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      setenv("XDG_CONFIG_HOME", home.c_str(), 1);
      unsetenv("XLAUNCH_CONFIG_FILE");
      for (auto& e : env) putenv(e.data());  // env outlives the exec: this process becomes xlaunch
      execv(XLAUNCH_BIN, argv.data());
      _exit(127);
    }
  }
  ~PtySession() {
    if (fd_ >= 0) close(fd_);
  }

  // Waits for `text` in the terminal's output (everything since the last expect()).
  bool expect(const std::string& text, double seconds = 20) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (pending_.find(text) == std::string::npos) {
      const int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count());
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, left) <= 0) continue;
      char buf[1024];
      const ssize_t n = read(fd_, buf, sizeof buf);
      if (n <= 0) return false;
      pending_.append(buf, static_cast<size_t>(n));
      all_.append(buf, static_cast<size_t>(n));
    }
    pending_ = pending_.substr(pending_.find(text) + text.size());
    return true;
  }
  void type(const std::string& line) { ASSERT_EQ(write(fd_, line.data(), line.size()), static_cast<ssize_t>(line.size())); }
  // The exit code, once the terminal has closed; -1 when the process had not ended within
  // `seconds` (it is killed then, with its process group).
  int wait(double seconds = 10) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    expect("\x01never\x01", seconds);  // drain until the terminal closes
    int status = 0;
    pid_t got = 0;
    while ((got = waitpid(pid_, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < end)
      usleep(10000);  // the terminal closes a moment before the process has ended
    if (got == 0) {
      kill(-pid_, SIGKILL);  // forkpty made it a session (and group) leader
      waitpid(pid_, &status, 0);
      return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  // The exit code as soon as the process has ended (reading the terminal meanwhile), without
  // waiting for the terminal to close: processes it left behind may still hold it. -1 when it had
  // not ended within `seconds` (it is killed then, with its process group).
  int wait_exit(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() >= end) {
        kill(-pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        return -1;
      }
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 5) > 0) {
        char buf[1024];
        const ssize_t n = read(fd_, buf, sizeof buf);
        if (n > 0) all_.append(buf, static_cast<size_t>(n)), pending_.append(buf, static_cast<size_t>(n));
        else usleep(5000);
      }
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  const std::string& transcript() const { return all_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string pending_, all_;
};
