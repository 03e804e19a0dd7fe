#include "xlaunch/status/flight_recorder.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <set>
#include <nlohmann/json.hpp>

#include "xlaunch/status/private_files.h"

namespace xlaunch::status {
namespace {

std::string ago(int64_t ns) {
  char buf[32];
  const double s = static_cast<double>(std::max<int64_t>(ns, 0)) / 1e9;
  if (s < 1e-3) std::snprintf(buf, sizeof buf, "%.0f us", s * 1e6);
  else if (s < 1) std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  else std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

const FlightEntry* entry_of(const RankFlight& r, uint64_t seq) {
  for (const auto& e : r.entries)
    if (e.seq == seq) return &e;
  return nullptr;
}

// The newest collective of r that has finished (done or failed), if the ring holds one.
const FlightEntry* last_finished(const RankFlight& r) {
  for (auto it = r.entries.rbegin(); it != r.entries.rend(); ++it)
    if (it->state == CollState::Done || it->state == CollState::Failed) return &*it;
  return nullptr;
}

std::string state_text(const FlightEntry& e, int64_t now) {
  switch (e.state) {
    case CollState::Issued: return "issued " + ago(now - e.issued_ns) + " ago, not started";
    case CollState::Running: return "running for " + ago(now - (e.start_ns ? e.start_ns : e.issued_ns));
    case CollState::Done:
      if (!e.end_ns) return "done";  // its end time not yet stored when read
      return "done in " + ago(e.end_ns - (e.start_ns ? e.start_ns : e.issued_ns)) + ", " + ago(now - e.end_ns) + " ago";
    case CollState::Failed: return e.end_ns ? "failed " + ago(now - e.end_ns) + " ago" : "failed";
    case CollState::Empty: break;
  }
  return "?";
}

// "last finished #511 11.2 s ago and is in forward" (or exited, or finished none).
std::string where_is(const RankFlight& r, int64_t now) {
  const FlightEntry* done = last_finished(r);
  std::string s = done ? "last finished #" + std::to_string(done->seq) + (done->end_ns ? " " + ago(now - done->end_ns) + " ago" : "")
                  : r.issued == 0 ? "issued no collective"
                                  : "has no finished collective left on its board";
  if (r.exited) return s + " and exited with code " + std::to_string(r.exit_status);
  if (r.phase != Phase::None) s += std::string(" and is in ") + phase_name(r.phase);
  return s;
}

std::string label(const FlightEntry& e, bool with_size) {
  std::string s = e.op + " #" + std::to_string(e.seq);
  if (with_size) s += " of " + size_text(e.numel * e.elem_bytes) + " " + e.dtype;
  return s;
}

uint64_t max_issued(const std::vector<RankFlight>& ranks) {
  uint64_t n = 0;
  for (const auto& r : ranks)
    if (r.seen) n = std::max(n, r.issued);
  return n;
}

}  // namespace

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return (ranks.size() == 1 ? "rank " : "ranks ") + s;
}

std::string size_text(int64_t n) {
  char buf[32];
  if (n >= (1 << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(n) / (1 << 20));
  else if (n >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(n) / 1024);
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(n));
  return buf;
}

RankFlight snapshot(const Board& b) {
  RankFlight r;
  r.rank = b.rank;
  r.seen = true;
  r.host.assign(b.host, strnlen(b.host, sizeof b.host));
  r.pid = b.pid;
  r.exited = b.life.load() == static_cast<int32_t>(Life::Exited);
  r.exit_status = b.exit_status.load();
  r.joined = b.joined.load() != 0;
  r.step = b.step.load();
  r.issued = b.issued.load();
  r.alive_ns = b.alive_ns.load();
  r.phase = static_cast<Phase>(b.phase.load());
  for (uint64_t seq = r.issued > kRing ? r.issued - kRing : 0; seq < r.issued; ++seq) {
    const CollectiveRecord* c = b.find(seq);
    if (!c) continue;
    // Read between two looks at its state, as a seqlock reads: a record its rank changed meanwhile
    // (a live board) is taken only when both looks agree.
    const uint64_t state_before = c->state.load(std::memory_order_acquire);
    FlightEntry e;
    e.seq = seq;
    e.op.assign(c->op, strnlen(c->op, sizeof c->op));
    e.dtype.assign(c->dtype, strnlen(c->dtype, sizeof c->dtype));
    e.numel = c->numel;
    e.elem_bytes = c->elem_bytes;
    e.bucket = c->bucket;
    e.issued_ns = c->issued_ns.load();
    e.start_ns = c->start_ns.load();
    e.end_ns = c->end_ns.load();
    std::atomic_thread_fence(std::memory_order_acquire);
    if (c->state.load(std::memory_order_relaxed) != state_before || c->seq.load(std::memory_order_relaxed) != seq)
      continue;
    e.state = c->state_of(seq);
    if (e.state != CollState::Empty) r.entries.push_back(e);
  }
  return r;
}

std::vector<RankFlight> read_flight(const std::string& dir, int world) {
  std::vector<RankFlight> out;
  for (int r = 0; r < world; ++r) {
    const Board* b = map_board(dir, r);
    RankFlight f;
    f.rank = r;
    if (b) {
      f = snapshot(*b);
      unmap_board(b);
    }
    out.push_back(f);
  }
  return out;
}

int flight_world(const std::string& dir) {
  std::string why;
  const int fd = files::open_private_dir(dir, &why);
  if (fd < 0) return 0;
  std::vector<int> ranks;
  for (const std::string& name : files::list_private_dir(fd))
    if (name.rfind("progress-", 0) == 0 && name.size() > 9 && name.find_first_not_of("0123456789", 9) == std::string::npos)
      ranks.push_back(std::stoi(name.substr(9)));
  close(fd);
  std::sort(ranks.begin(), ranks.end());
  for (int r : ranks)
    if (const Board* b = map_board(dir, r)) {
      const int world = b->world;
      unmap_board(b);
      return world;
    }
  return 0;
}

std::string flight_table(const std::vector<RankFlight>& ranks, int64_t now_ns, int last) {
  const uint64_t issued = max_issued(ranks);
  if (issued == 0) return "";
  const uint64_t top = issued - 1;
  const uint64_t first = top + 1 >= static_cast<uint64_t>(last) ? top + 1 - last : 0;
  std::string out = "last collectives:\n";
  char row[512];
  std::snprintf(row, sizeof row, "  %-5s %-8s %-14s %-28s %s\n", "rank", "#", "op", "size", "state");
  out += row;
  for (uint64_t seq = first; seq <= top; ++seq)
    for (const auto& r : ranks) {
      const FlightEntry* e = r.seen ? entry_of(r, seq) : nullptr;
      if (!e) continue;
      std::string size = size_text(e->numel * e->elem_bytes) + " " + e->dtype;
      if (e->bucket >= 0) size += " bucket " + std::to_string(e->bucket);
      std::snprintf(row, sizeof row, "  %-5d %-8llu %-14s %-28s %s\n", r.rank, static_cast<unsigned long long>(seq),
                    e->op.c_str(), size.c_str(), state_text(*e, now_ns).c_str());
      out += row;
    }
  for (const auto& r : ranks) {
    std::string note;
    if (!r.seen) note = "no progress board visible from this machine (other machines need a shared log_dir)";
    else if (r.issued <= top) note = "not in #" + std::to_string(top) + ": " + where_is(r, now_ns);
    if (note.empty()) continue;
    std::snprintf(row, sizeof row, "  %-5d %-8s %s\n", r.rank, "-", note.c_str());
    out += row;
  }
  return out;
}

std::optional<Desync> find_desync(const std::vector<RankFlight>& ranks) {
  std::set<uint64_t> seqs;
  for (const auto& r : ranks)
    for (const auto& e : r.entries) seqs.insert(e.seq);
  for (const uint64_t seq : seqs) {
    std::vector<std::pair<const FlightEntry*, std::vector<int>>> groups;  // the same op, dtype and size
    for (const auto& r : ranks) {
      // A joined rank (uneven inputs) takes part in the others' steps with collectives of its own
      // making: not another path of the training loop (the watchdog's verdict explains it).
      const FlightEntry* e = r.seen && !r.joined ? entry_of(r, seq) : nullptr;
      if (!e) continue;
      auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) {
        return x.first->op == e->op && x.first->dtype == e->dtype && x.first->numel == e->numel;
      });
      if (g == groups.end()) groups.push_back({e, {r.rank}});
      else g->second.push_back(r.rank);
    }
    if (groups.size() < 2) continue;
    std::stable_sort(groups.begin(), groups.end(),
                     [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
    bool same_op = true;
    for (const auto& g : groups) same_op = same_op && g.first->op == groups.front().first->op;
    const auto in = [&](const auto& g) {
      return rank_list(g.second) + (g.second.size() == 1 ? " is in " : " are in ") + label(*g.first, same_op);
    };
    Desync d;
    d.seq = seq;
    std::string minority;
    for (size_t i = 1; i < groups.size(); ++i) {
      minority += (minority.empty() ? "" : "; ") + in(groups[i]);
      d.odd.insert(d.odd.end(), groups[i].second.begin(), groups[i].second.end());
    }
    std::sort(d.odd.begin(), d.odd.end());
    const bool tie = groups[0].second.size() == groups[1].second.size();
    d.text = minority + " while " + in(groups[0]) +
             (tie ? ": the ranks' training loops took different paths"
                  : ": the training loop took another path on " + rank_list(d.odd));
    return d;
  }
  return std::nullopt;
}

std::string flight_finding(const std::vector<RankFlight>& ranks, int64_t now_ns) {
  if (const auto d = find_desync(ranks)) return d->text;
  // A straggler: ranks that never entered the newest collective while others did.
  const uint64_t issued = max_issued(ranks);
  if (issued == 0) return "";
  const uint64_t top = issued - 1;
  std::vector<int> entered, missing;
  const FlightEntry* newest = nullptr;
  bool all_seen = true;
  for (const auto& r : ranks) {
    if (!r.seen) {
      all_seen = false;
      continue;
    }
    if (r.issued > top) {
      entered.push_back(r.rank);
      if (!newest) newest = entry_of(r, top);
    } else if (!r.joined) {
      missing.push_back(r.rank);
    }
  }
  if (missing.empty() || entered.empty()) return "";
  const std::string what = newest ? label(*newest, false) : "#" + std::to_string(top);
  std::string s = all_seen && missing.size() == 1 ? "every rank but " + std::to_string(missing.front()) + " entered " + what
                                                  : rank_list(entered) + " entered " + what;
  for (const auto& r : ranks)
    if (std::find(missing.begin(), missing.end(), r.rank) != missing.end())
      s += "; rank " + std::to_string(r.rank) + " " + where_is(r, now_ns);
  return s;
}

std::string flight_json(const std::vector<RankFlight>& ranks, int64_t taken_ns) {
  nlohmann::json doc;
  doc["taken_ns"] = taken_ns;
  doc["ranks"] = nlohmann::json::array();
  for (const auto& r : ranks) {
    nlohmann::json j{{"rank", r.rank}, {"seen", r.seen}, {"host", r.host}, {"pid", r.pid}, {"exited", r.exited},
                     {"exit_status", r.exit_status}, {"joined", r.joined}, {"step", r.step}, {"issued", r.issued},
                     {"alive_ns", r.alive_ns}, {"phase", static_cast<int>(r.phase)}};
    j["entries"] = nlohmann::json::array();
    for (const auto& e : r.entries)
      j["entries"].push_back({{"seq", e.seq}, {"op", e.op}, {"dtype", e.dtype}, {"numel", e.numel},
                              {"elem_bytes", e.elem_bytes}, {"bucket", e.bucket}, {"issued_ns", e.issued_ns},
                              {"start_ns", e.start_ns}, {"end_ns", e.end_ns}, {"state", static_cast<int>(e.state)}});
    doc["ranks"].push_back(j);
  }
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::optional<std::pair<std::vector<RankFlight>, int64_t>> parse_flight_json(const std::string& text) {
  try {
    const nlohmann::json doc = nlohmann::json::parse(text);
    std::vector<RankFlight> ranks;
    for (const auto& j : doc.at("ranks")) {
      RankFlight r;
      r.rank = j.at("rank").get<int>();
      r.seen = j.at("seen").get<bool>();
      r.host = j.at("host").get<std::string>();
      r.pid = j.at("pid").get<int>();
      r.exited = j.at("exited").get<bool>();
      r.exit_status = j.at("exit_status").get<int>();
      r.joined = j.at("joined").get<bool>();
      r.step = j.at("step").get<int64_t>();
      r.issued = j.at("issued").get<uint64_t>();
      r.alive_ns = j.at("alive_ns").get<int64_t>();
      r.phase = static_cast<Phase>(std::clamp(j.at("phase").get<int>(), 0, 3));
      for (const auto& x : j.at("entries")) {
        FlightEntry e;
        e.seq = x.at("seq").get<uint64_t>();
        e.op = x.at("op").get<std::string>();
        e.dtype = x.at("dtype").get<std::string>();
        e.numel = x.at("numel").get<int64_t>();
        e.elem_bytes = x.at("elem_bytes").get<int>();
        e.bucket = x.at("bucket").get<int>();
        e.issued_ns = x.at("issued_ns").get<int64_t>();
        e.start_ns = x.at("start_ns").get<int64_t>();
        e.end_ns = x.at("end_ns").get<int64_t>();
        e.state = static_cast<CollState>(std::clamp(x.at("state").get<int>(), 0, 4));
        r.entries.push_back(e);
      }
      ranks.push_back(r);
    }
    return std::make_pair(ranks, doc.at("taken_ns").get<int64_t>());
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

}  // namespace xlaunch::status
