// op_profile.h's aggregate: torch.profiler's key_averages() over Kineto's events, in C++. The steps
// follow torch/autograd/profiler.py (_parse_kineto_results) and profiler_util.py (EventList's
// _build_tree, _remove_dup_nodes, key_averages; FunctionEvent's self times) so that a row means
// what the same row of torch.profiler's table means.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "profile/op_profile.h"

namespace xlaunch::profile::ops {
namespace {

bool left_out(const std::string& name) {  // profiler_util.py's _filter_name
  static const std::set<std::string> kNames = {"[memory]", "[OutOfMemory]", "profiler::_record_function_enter",
                                                "profiler::_record_function_enter_new",
                                                "profiler::_record_function_exit", "aten::is_leaf",
                                                "aten::output_nr", "aten::_version"};
  return kNames.count(name) > 0;
}

struct Node {
  const Event* e;
  int64_t kernel_ns = 0;  // the kernels it launched itself
  bool claimed = false;   // a kernel: counted in the operator that launched it
  int parent = -1;
  std::vector<int> children;
  bool merged = false;     // removed by step 4: its parent of the same name stands for it
};

bool sync_cpu(const Event& e) { return !e.on_device && !e.async; }

// Step 3: the parents, per thread, from nodes in start order (longer first).
void build_tree(std::vector<Node>& nodes) {
  std::map<uint64_t, std::vector<int>> by_thread;  // stable: each thread's nodes keep the start order
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i)
    if (sync_cpu(*nodes[i].e)) by_thread[nodes[i].e->thread].push_back(i);
  for (const auto& [thread, ids] : by_thread) {
    std::vector<int> open;
    for (int i : ids) {
      const Event& e = *nodes[i].e;
      while (!open.empty()) {
        const Event& p = *nodes[open.back()].e;
        if (e.start_ns >= p.end_ns || e.end_ns > p.end_ns) {
          open.pop_back();
          continue;
        }
        nodes[open.back()].children.push_back(i);
        nodes[i].parent = open.back();
        break;
      }
      open.push_back(i);
    }
  }
}

// Step 4, until nothing changes: an only child of the same name gives its children and kernels to
// its parent and leaves the tree.
void merge_duplicates(std::vector<Node>& nodes) {
  for (bool changed = true; changed;) {
    changed = false;
    for (Node& n : nodes) {
      if (n.merged || n.parent < 0) continue;
      Node& p = nodes[n.parent];
      if (p.e->name != n.e->name || p.children.size() != 1) continue;
      p.children = n.children;
      p.kernel_ns = n.kernel_ns;
      for (int c : n.children) nodes[c].parent = n.parent;
      n.merged = changed = true;
    }
  }
}

int64_t duration(const Event& e) { return e.end_ns - e.start_ns; }

}  // namespace

Profile aggregate(std::vector<Event> events, bool by_shapes, bool by_device) {
  events.erase(std::remove_if(events.begin(), events.end(), [](const Event& e) { return left_out(e.name); }),
               events.end());

  // Step 2: kernels and runtime calls to the operators they link to (operators link to nothing).
  std::unordered_map<uint64_t, std::vector<size_t>> linked;
  for (size_t i = 0; i < events.size(); ++i)
    if (events[i].linked_correlation > 0) linked[events[i].linked_correlation].push_back(i);
  std::vector<int64_t> kernel_ns(events.size(), 0);
  std::vector<bool> claimed(events.size(), false);  // a kernel some operator launched
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& op = events[i];
    if (op.linked_correlation != 0 || !sync_cpu(op)) continue;
    const auto it = linked.find(op.correlation);
    if (it == linked.end()) continue;
    for (size_t k : it->second) {
      if (events[k].on_device) {
        kernel_ns[i] += duration(events[k]);
        claimed[k] = true;
      } else {
        events[k].thread = op.thread;
      }
    }
  }

  // In start order, longer first; ties keep Kineto's order (Python's sort is stable too).
  std::vector<size_t> order(events.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::make_tuple(events[a].start_ns, -events[a].end_ns) < std::make_tuple(events[b].start_ns, -events[b].end_ns);
  });
  std::vector<Node> nodes;
  nodes.reserve(order.size());
  for (size_t i : order) nodes.push_back(Node{&events[i], kernel_ns[i], claimed[i], -1, {}, false});
  build_tree(nodes);
  merge_duplicates(nodes);

  // Step 5: one row per name (and shapes), in the order met; then ranked.
  Profile out;
  std::map<std::pair<std::string, std::string>, size_t> row_of;
  for (const Node& n : nodes) {
    if (n.merged) continue;
    const Event& e = *n.e;
    const auto row = [&](const std::string& shapes) -> status::OpRow& {
      auto [it, added] = row_of.emplace(std::make_pair(e.name, shapes), out.rows.size());
      if (added) out.rows.push_back({e.name, shapes});
      return out.rows[it->second];
    };
    if (e.on_device) {
      if (e.async) continue;
      out.device_total_ns += duration(e);
      // A kernel no profiled operator launched (NCCL's, from xlaunch's communication thread, say):
      // a row of its own, as torch.profiler shows it, so that the shares add up and the device
      // time it takes does not vanish from the table.
      if (!n.claimed) {
        status::OpRow& r = row("");
        ++r.calls;
        r.self_cuda_ns += duration(e);
      }
      continue;
    }
    int64_t self = 0, self_kernels = 0;
    if (!e.async) {
      self = duration(e);
      for (int c : n.children) self -= duration(*nodes[c].e);
      self_kernels = n.kernel_ns;
    }
    status::OpRow& r = row(by_shapes ? e.shapes : std::string());
    ++r.calls;
    r.self_cpu_ns += self;
    r.cpu_total_ns += duration(e);
    r.self_cuda_ns += self_kernels;
    out.self_cpu_total_ns += self;
    out.cpu_events.push_back(e);
  }
  for (status::OpRow& r : out.rows) {
    const int64_t part = by_device ? r.self_cuda_ns : r.self_cpu_ns, whole = by_device ? out.device_total_ns : out.self_cpu_total_ns;
    r.share = whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
  }
  std::stable_sort(out.rows.begin(), out.rows.end(), [by_device](const status::OpRow& a, const status::OpRow& b) {
    const int64_t ta = by_device ? a.self_cuda_ns : a.self_cpu_ns, tb = by_device ? b.self_cuda_ns : b.self_cpu_ns;
    return std::tie(tb, a.name, a.shapes) < std::tie(ta, b.name, b.shapes);
  });
  return out;
}

}  // namespace xlaunch::profile::ops
