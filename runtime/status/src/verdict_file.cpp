#include "xlaunch/status/verdict_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <sstream>

#include "xlaunch/status/private_files.h"

namespace xlaunch::status {
namespace {

constexpr const char* kFileName = "verdict";

}  // namespace

bool write_verdict(const std::string& dir, const Verdict& v) {
  const std::string path = dir + "/" + kFileName;
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return false;  // another rank's verdict stands
  const std::string text = std::to_string(v.exit_code) + " " + std::to_string(v.rank) + "\n" + v.message + "\n";
  const ssize_t n = write(fd, text.data(), text.size());
  (void)n;  // a verdict cut short fails to parse, and the ranks' exit statuses decide instead
  close(fd);
  return true;
}

std::optional<Verdict> read_verdict(const std::string& dir) {
  std::string why;
  const int fd = files::open_private_dir(dir, &why);
  if (fd < 0) return std::nullopt;
  const std::string text = files::read_private_file(fd, kFileName).value_or("");
  close(fd);
  std::istringstream in(text);
  Verdict v;
  if (!(in >> v.exit_code >> v.rank)) return std::nullopt;
  in.ignore(1);
  std::getline(in, v.message);
  if (v.message.empty()) return std::nullopt;
  return v;
}

}  // namespace xlaunch::status
