#include "watch/verdict.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "xlaunch/status/flight_recorder.h"

namespace xlaunch::watch {
namespace {

std::string seconds(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f s", static_cast<double>(ns) / 1e9);
  return buf;
}

// "its last: allreduce #456 at step 112, 601 s ago" (or "it issued no collective yet").
std::string last_of(const Board& b, int64_t now) {
  const uint64_t n = b.issued.load();
  const std::string step = "step " + std::to_string(b.step.load());
  if (n == 0) return "it issued no collective, at " + step;
  const CollectiveRecord* r = b.find(n - 1);
  if (!r) return "its last: #" + std::to_string(n - 1) + " at " + step;
  const int64_t when = r->end_ns.load() ? r->end_ns.load() : r->issued_ns.load();
  return "its last: " + std::string(r->op) + " #" + std::to_string(n - 1) + " at " + step + ", " + seconds(now - when) +
         " ago";
}

std::string exit_text(const Board& b) {
  const int s = b.exit_status.load();
  return s == 0 ? "finished (exit code 0)" : "failed (exit code " + std::to_string(s) + ")";
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

}  // namespace

std::string describe(const CollectiveRecord& r) {
  std::string s = std::string(r.op) + " #" + std::to_string(r.seq.load()) + " (";
  if (r.bucket >= 0) s += "bucket " + std::to_string(r.bucket) + ", ";
  return s + status::size_text(r.numel * r.elem_bytes) + " " + r.dtype + ")";
}

Verdict stuck_verdict(const CollectiveRecord& open, const std::vector<const Board*>& boards, int64_t waited_ns,
                      int64_t now_ns) {
  const uint64_t seq = open.seq.load();
  std::vector<int> entered, missing, unseen, joined;
  std::string other_collective;  // a joined rank in another collective of this number
  for (int r = 0; r < static_cast<int>(boards.size()); ++r) {
    if (!boards[r]) unseen.push_back(r);
    else if (boards[r]->joined.load()) joined.push_back(r);
    else if (boards[r]->issued.load() > seq) entered.push_back(r);
    else missing.push_back(r);
    const CollectiveRecord* theirs = boards[r] && boards[r]->joined.load() ? boards[r]->find(seq) : nullptr;
    if (theirs && other_collective.empty() && !same_collective(open, *theirs))
      other_collective = "rank " + std::to_string(r) + " is in " + describe(*theirs);
  }
  Verdict v;
  v.exit_code = 124;
  v.message = "job stuck: " + describe(open) + " waited " + seconds(waited_ns) + ": ";
  // Ranks in different collectives of this number: the training loop took another path on some
  // (the flight recorder's finding): they are the ones at fault, not the first that entered.
  std::vector<status::RankFlight> seen;
  for (const Board* b : boards)
    if (b) seen.push_back(status::snapshot(*b));
  if (const auto d = status::find_desync(seen); d && d->seq == seq) {
    v.rank = d->odd.front();
    v.message += d->text;
    return v;
  }
  if (missing.empty()) {
    v.rank = entered.empty() ? -1 : entered.front();
    v.message += entered.empty() ? "no rank that has not joined is in it, and none finished it"
                 : unseen.empty() && joined.empty() ? "every rank entered it and none finished it"
                                                    : "ranks " + rank_list(entered) + " entered it and none finished it";
    std::vector<std::string> hosts;
    for (int r : entered)
      if (std::find(hosts.begin(), hosts.end(), boards[r]->host) == hosts.end()) hosts.push_back(boards[r]->host);
    if (hosts.size() > 1)
      v.message += " (on " + std::to_string(hosts.size()) +
                   " machines: this points at the network between the machines, not at a rank)";
  } else {
    v.rank = missing.front();
    v.message += (entered.size() == 1 ? "rank " : "ranks ") + rank_list(entered) + " entered, ";
    for (size_t i = 0; i < missing.size(); ++i)
      v.message += (i ? "; " : "") + std::string("rank ") + std::to_string(missing[i]) + " never did (" +
                   last_of(*boards[missing[i]], now_ns) + ")";
  }
  if (!joined.empty()) {
    // Not at fault: a joined rank issues the collectives of the others' steps as they come.
    v.message += (joined.size() == 1 ? "; rank " : "; ranks ") + rank_list(joined) +
                 " joined (data ended; taking part in the others' steps with nothing of its own)";
    if (!other_collective.empty())
      v.message += ", and " + other_collective + " instead: with uneven inputs a training step may issue no "
                   "collective besides the Accelerator's own (acc.gather, acc.reduce, wait_for_everyone): move "
                   "those after the epoch (docs/data-loading.md#uneven-inputs)";
    if (missing.empty() && entered.empty()) v.rank = joined.front();
  }
  if (!unseen.empty())
    v.message += (unseen.size() == 1 ? "; rank " : "; ranks ") + rank_list(unseen) +
                 ": no progress board visible from this machine (other machines need a shared log_dir)";
  return v;
}

Verdict left_verdict(int me, const CollectiveRecord& open, int gone, const Board& theirs, int64_t now_ns) {
  Verdict v;
  v.rank = gone;
  v.exit_code = theirs.exit_status.load() == 0 ? 1 : theirs.exit_status.load();  // the job fails with its code
  v.message = "rank " + std::to_string(gone) + " " + exit_text(theirs) + " and left the job while rank " +
              std::to_string(me) + " waited for it in " + describe(open) + " (" + last_of(theirs, now_ns) +
              "); every rank must issue the same collectives: a rank that stops early must stop all of them";
  return v;
}

Verdict gone_verdict(int me, const CollectiveRecord& open, int gone, const Board& theirs, int64_t now_ns) {
  Verdict v;
  v.rank = gone;
  v.message = "rank " + std::to_string(gone) + " (pid " + std::to_string(theirs.pid) + " on " + theirs.host +
              ") is gone without an exit status (killed?) while rank " + std::to_string(me) + " waited for it in " +
              describe(open) + " (" + last_of(theirs, now_ns) + ")";
  return v;
}

bool same_collective(const CollectiveRecord& a, const CollectiveRecord& b) {
  return std::strncmp(a.op, b.op, sizeof a.op) == 0 && std::strncmp(a.dtype, b.dtype, sizeof a.dtype) == 0 &&
         a.numel == b.numel;
}

Verdict mismatch_verdict(int me, const CollectiveRecord& mine, int other, const CollectiveRecord& theirs) {
  const auto side = [](int rank, const CollectiveRecord& r, bool first) {
    return "rank " + std::to_string(rank) + (first ? " is in " : " in ") + r.op + " #" + std::to_string(r.seq.load()) +
           " of [" + std::to_string(r.numel) + "] " + r.dtype;
  };
  const bool me_first = me < other;
  Verdict v;
  v.rank = other == 0 ? me : other;  // ranks compare with rank 0 first: whoever differs from it is at fault
  v.message = "collective mismatch at #" + std::to_string(mine.seq.load()) + ": " +
              (me_first ? side(me, mine, true) + ", " + side(other, theirs, false)
                        : side(other, theirs, true) + ", " + side(me, mine, false)) +
              "; every rank must issue the same collectives in the same order";
  return v;
}

bool publish_verdict(const std::string& dir, const Verdict& v) {
  if (!dir.empty() && !status::write_verdict(dir, v)) return false;  // another rank's verdict stands
  std::fprintf(stderr, "xlaunch: %s\n", v.message.c_str());
  std::fflush(stderr);
  return true;
}

}  // namespace xlaunch::watch
