// Running the real xlaunch binary from a test: output (stdout and stderr together) and exit code;
// and what the tests ask of that output.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

namespace xlaunch::test {

struct Child {
  pid_t pid = -1;
  int out = -1;  // read end: the child's stdout and stderr
  std::string output;

  // Reads until `text` appears in the output or the child closes it or `seconds` pass.
  bool read_until(const std::string& text, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (output.find(text) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{out, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      const ssize_t n = read(out, buf, sizeof buf);
      if (n <= 0) return output.find(text) != std::string::npos;
      output.append(buf, static_cast<size_t>(n));
    }
    return true;
  }

  // Reads to the end and returns the exit code (128 + signal when killed).
  int wait() {
    read_until(std::string(1, '\0'), 300);
    close(out);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

// env: "NAME=VALUE" sets, "NAME" alone unsets; applied on top of this process's environment.
inline Child spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  Child c;
  c.pid = fork();
  if (c.pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    for (const auto& e : env) {
      const size_t eq = e.find('=');
      if (eq == std::string::npos) unsetenv(e.c_str());
      else setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  c.out = fds[0];
  return c;
}

struct Result {
  int exit_code;
  std::string output;
};

inline Result run(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
  Child c = spawn(argv, env);
  const int code = c.wait();
  return {code, c.output};
}

// Whether `part` occurs in s.
inline bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// How many times `part` occurs in s (overlapping occurrences counted).
inline int count(const std::string& s, const std::string& part) {
  int n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

}  // namespace xlaunch::test
