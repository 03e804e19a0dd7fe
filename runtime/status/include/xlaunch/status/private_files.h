// Files that only this user can have written: what the launcher and the ranks exchange through the
// status directory (rank exit statuses, progress boards, the watchdog's verdict), and the checks
// that keep another local user from planting, forging or redirecting them (docs/security.md).
//
// Part of the status library (status_dir.h), shared by the launcher and the runtime (no torch, no
// MPI); the checkpoints' temporaries use it too. Every function reports a problem as a sentence
// naming the path and the reason; the callers turn it into their own error or warning.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace xlaunch::files {

// Why `dir` is not a safe place to create private files in, or "" when it is: it must be a
// directory owned by this user or by root, and a directory every user may write to must be sticky
// (like /tmp), so that nobody else can rename or replace what this user creates there. A
// group-writable directory of this user's (a project directory) is accepted.
std::string parent_problem(const std::string& dir);

// Creates a new directory `parent/prefix` + 6 random characters, mode 0700 (mkdtemp), after
// checking parent_problem(parent). Returns its path, or "" and sets *why.
std::string make_private_dir(const std::string& parent, const std::string& prefix, std::string* why);

// Opens `dir` (O_DIRECTORY|O_NOFOLLOW: not through a symbolic link) when it is owned by this user
// and not writable by every user. Returns the descriptor, or -1 and sets *why. (What is read from
// it is checked file by file: regular, not a link, this user's.)
int open_private_dir(const std::string& dir, std::string* why);

// Writes `bytes` to dirfd/name atomically: a new temporary file with a random name (O_CREAT|O_EXCL|
// O_NOFOLLOW, mode 0600: never an existing file or a link someone planted), then renamed over
// `name` (which replaces a link there instead of following it). Returns false and sets *why.
bool write_private_file(int dirfd, const std::string& name, const std::string& bytes, std::string* why);

// Contents of dirfd/name when it is a regular file (not a link) owned by this user and at most
// max_bytes long; nullopt otherwise (missing, foreign, forged through a link, too large).
std::optional<std::string> read_private_file(int dirfd, const std::string& name, size_t max_bytes = 65536);

// The names in the directory open as dirfd (from open_private_dir), without "." and "..", in the
// order the directory gives them; empty when it cannot be read. dirfd stays open.
std::vector<std::string> list_private_dir(int dirfd);

// A new file `path` (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600: never one someone put there first),
// `bytes` long, mapped shared read-write: what a rank publishes to the launcher and its peers
// (progress boards, step stats). nullptr when it fails, with *why ("cannot create|size|map PATH:
// reason") and errno the cause.
void* map_new_file(const std::string& path, size_t bytes, std::string* why);

// `path` mapped shared read-only when it is a regular file (not a link) this user owns, exactly
// `bytes` long (what map_new_file made); nullptr otherwise. Unmap with munmap(p, bytes).
const void* map_own_file(const std::string& path, size_t bytes);

// Removes every entry of the private directory `dir` that this user owns, then the directory
// itself. Nothing happens when `dir` is not a private directory of this user.
void remove_private_dir(const std::string& dir);

// `mkdir -p dir`, mode 0755: the user's own output directories (log_dir, trace_dir), not private
// ones. Returns false and sets *why ("cannot create directory PART: reason") at the first part that
// cannot be made; parts that exist are fine.
bool make_dirs(const std::string& dir, std::string* why);

// "uid 65534 (nobody)": who owns something, for messages.
std::string describe_owner(uid_t uid);

}  // namespace xlaunch::files
