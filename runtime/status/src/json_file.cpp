#include "json_file.h"

#include <fcntl.h>
#include <unistd.h>

#include "xlaunch/status/private_files.h"

namespace xlaunch::status {
namespace {

using nlohmann::json;

bool read_json(const std::string& dir, const std::string& name, const AcceptJson& accept, bool take) {
  std::string why;
  const int dirfd = files::open_private_dir(dir, &why);
  if (dirfd < 0) return false;
  bool accepted = false;
  if (const auto text = files::read_private_file(dirfd, name, size_t{1} << 30)) {
    try {
      accepted = accept(json::parse(*text));
    } catch (const json::exception&) {
    }
    if (accepted && take) unlinkat(dirfd, name.c_str(), 0);
  }
  close(dirfd);
  return accepted;
}

}  // namespace

bool write_json_file(const std::string& dir, const std::string& name, const json& value, std::string* why,
                     json::error_handler_t on_bad_utf8) {
  const int dirfd = files::open_private_dir(dir, why);
  if (dirfd < 0) return false;
  const bool ok = files::write_private_file(dirfd, name, value.dump(-1, ' ', false, on_bad_utf8) + "\n", why);
  close(dirfd);
  return ok;
}

bool read_json_file(const std::string& dir, const std::string& name, const AcceptJson& accept) {
  return read_json(dir, name, accept, false);
}

bool take_json_file(const std::string& dir, const std::string& name, const AcceptJson& accept) {
  return read_json(dir, name, accept, true);
}

}  // namespace xlaunch::status
