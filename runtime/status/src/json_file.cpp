#include "json_file.h"

#include <fcntl.h>
#include <unistd.h>

#include "xlaunch/status/private_files.h"

namespace xlaunch::status {

using nlohmann::json;

bool write_json_file(const std::string& dir, const std::string& name, const json& value, std::string* why,
                     json::error_handler_t on_bad_utf8) {
  // First: dump throws on a string that is not UTF-8 (strict), and must not leave the directory open.
  const std::string text = value.dump(-1, ' ', false, on_bad_utf8) + "\n";
  const int dirfd = files::open_private_dir(dir, why);
  if (dirfd < 0) return false;
  const bool ok = files::write_private_file(dirfd, name, text, why);
  close(dirfd);
  return ok;
}

bool read_json_file(const std::string& dir, const std::string& name, AfterRead after,
                    const std::function<bool(const json&)>& accept) {
  std::string why;
  const int dirfd = files::open_private_dir(dir, &why);
  if (dirfd < 0) return false;
  bool accepted = false;
  if (const auto text = files::read_private_file(dirfd, name, size_t{1} << 30)) {
    try {
      accepted = accept(json::parse(*text));
    } catch (const json::exception&) {
    }
    if (accepted && after == AfterRead::remove) unlinkat(dirfd, name.c_str(), 0);
  }
  close(dirfd);
  return accepted;
}

}  // namespace xlaunch::status
