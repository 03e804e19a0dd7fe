// The rank wrapper's lifeline (`xlaunch __rank`, rank_wrapper.h): what ends the processes of a job on
// a machine that lost the launching one, since nobody else can (docs/failures.md, "When a machine
// goes away").
//
// Open MPI's daemon (orted) on a machine whose link went down keeps trying to tell mpirun that its
// ranks ended: its connection then has data in flight, so TCP keepalive does not apply and the
// kernel retransmits for about 15 minutes. The wrapper therefore checks, itself, that the launching
// machine answers: a TCP connection to mpirun's own out-of-band port (OMPI_MCA_orte_hnp_uri, which
// Open MPI gives every rank; mpirun accepts it and drops it without a word). One wrapper per
// machine (local rank 0) checks every kProbeEveryS while its rank runs; every wrapper checks when
// its rank has failed, before it leaves. When the launcher has not answered for lost_after_s (or,
// while the rank runs, refuses: mpirun is gone), the wrapper ends its rank and the daemon that
// started it (SIGTERM, then SIGKILL kEndGraceS later), whose other ranks' wrappers then see their
// parent gone and end theirs.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace xlaunch::launcher {

inline constexpr int kProbeEveryS = 2;     // between two checks while the rank runs
inline constexpr int kProbeTimeoutMs = 2000;  // one connection attempt
inline constexpr int kEndGraceS = 2;       // SIGTERM to SIGKILL

// Pure: the TCP endpoints in an Open MPI contact URI ("1234.0;tcp://10.0.0.1,10.1.0.1:5000;tcp6://[fd00::2]:5001"
// gives {10.0.0.1, 5000}, {10.1.0.1, 5000}); IPv4 only; none when it does not parse.
std::vector<std::pair<std::string, int>> tcp_endpoints(const std::string& uri);

// Connects the non-blocking TCP socket fd to host:port (IPv4), waiting at most timeout_ms: 0, or
// the error (ECONNREFUSED, ETIMEDOUT, EINVAL for a host that is not an IPv4 address, ...).
int connect_within(int fd, const std::string& host, int port, int timeout_ms);

// A check of the launching machine: mpirun accepted the connection; the machine answered that
// nothing listens there any more (mpirun is gone); or no answer within the timeout (the link, or
// the machine, is down).
enum class Answer { kAccepted, kRefused, kSilent };

// Tries each endpoint, for at most timeout_ms each, until one accepts (the connection is closed at
// once); kRefused when none accepted and one refused.
Answer check_launcher(const std::vector<std::pair<std::string, int>>& endpoints, int timeout_ms);

// Pure: seconds without an answer after which the machine counts as cut off: timeout_s (the job's
// own bound on lack of progress), at least 10; 600 when the watchdog is off (timeout_s 0).
int lost_after_s(int timeout_s);

// Pure: the lifeline's clock, fed the latest check's answer at now_ns. Returns true once the
// launcher is lost: refused (mpirun is gone), or silent for lost_after_s since the first silent
// check (an accepted connection resets it).
class LauncherSilence {
 public:
  explicit LauncherSilence(int lost_after_s) : lost_after_ns_(int64_t{lost_after_s} * 1000000000) {}
  bool lost(int64_t now_ns, Answer answer);
  int64_t silent_since_ns() const { return since_ns_; }

 private:
  int64_t lost_after_ns_;
  int64_t since_ns_ = 0;
};

}  // namespace xlaunch::launcher
