// The C++ side of the python oracle (safetensors_oracle_test.py), which compares it with the
// safetensors package in both directions:
//   safetensors_tool save DIR SEED MAX_SHARD_BYTES [KILL_AT|print]
//       save_safetensors(safetensors_samples(SEED)) into DIR; with KILL_AT, raise SIGKILL at that
//       save event; with "print", print each event on its own line
//   safetensors_tool expect DIR SEED
//       the same tensors as raw bytes, the oracle's answer: DIR/expected.json lists
//       {"name", "dtype" (safetensors name), "shape", "file"} in save order; each file holds the
//       tensor's contiguous bytes
//   safetensors_tool check PATH EXPECTED_DIR
//       load_safetensors(PATH) holds exactly the tensors EXPECTED_DIR describes, bit for bit
// Exit status 0 when it did what was asked, 1 otherwise (with the reason on stderr).
#include <nlohmann/json.hpp>

#include <csignal>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>

#include "safetensors_samples.h"
#include "xlaunch/safetensors.h"

namespace {

using xlaunch::test::safetensors_dtypes;

std::string dtype_name(at::ScalarType t) {
  for (const auto& [name, type] : safetensors_dtypes())
    if (type == t) return name;
  throw std::runtime_error("no safetensors name for " + std::string(at::toString(t)));
}

at::ScalarType dtype_of(const std::string& n) {
  for (const auto& [name, type] : safetensors_dtypes())
    if (name == n) return type;
  throw std::runtime_error("unknown dtype " + n);
}

int save(const std::string& dir, uint64_t seed, int64_t max_shard, const std::string& kill_at) {
  if (kill_at == "print")
    xlaunch::set_safetensors_save_hook([](const std::string& event) { std::cout << event << std::endl; });
  else if (!kill_at.empty())
    xlaunch::set_safetensors_save_hook([kill_at](const std::string& event) {
      if (event == kill_at) std::raise(SIGKILL);
    });
  xlaunch::save_safetensors(xlaunch::test::safetensors_samples(seed), dir, max_shard,
                            {{"producer", "xlaunch safetensors_tool"}, {"seed", std::to_string(seed)}});
  return 0;
}

int expect(const std::string& dir, uint64_t seed) {
  nlohmann::json list = nlohmann::json::array();
  int i = 0;
  for (const auto& [name, t] : xlaunch::test::safetensors_samples(seed)) {
    const std::string file = std::to_string(i++) + ".bin";
    const at::Tensor c = t.contiguous();
    std::ofstream(dir + "/" + file, std::ios::binary).write(static_cast<const char*>(c.data_ptr()), c.nbytes());
    list.push_back({{"name", name}, {"dtype", dtype_name(t.scalar_type())}, {"shape", t.sizes().vec()}, {"file", file}});
  }
  std::ofstream(dir + "/expected.json") << list.dump(1) << "\n";
  return 0;
}

int check(const std::string& path, const std::string& expected_dir) {
  std::map<std::string, at::Tensor> loaded;
  for (auto& [name, t] : xlaunch::load_safetensors(path)) loaded[name] = t;
  std::ifstream in(expected_dir + "/expected.json");
  const nlohmann::json list = nlohmann::json::parse(in);
  int failures = 0;
  for (const auto& e : list) {
    const std::string name = e["name"];
    std::ifstream bin(expected_dir + "/" + e["file"].get<std::string>(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(bin)), std::istreambuf_iterator<char>());
    at::Tensor want = at::empty(e["shape"].get<std::vector<int64_t>>(), at::TensorOptions().dtype(dtype_of(e["dtype"])));
    if (static_cast<size_t>(want.nbytes()) != bytes.size()) throw std::runtime_error("bad expectation for " + name);
    std::memcpy(want.data_ptr(), bytes.data(), bytes.size());
    const auto it = loaded.find(name);
    if (it == loaded.end()) {
      std::cerr << "check: " << path << " lacks '" << name << "'\n";
      ++failures;
      continue;
    }
    if (!xlaunch::test::same_bits(it->second, want)) {
      std::cerr << "check: '" << name << "' differs: loaded " << it->second.sizes() << " "
                << at::toString(it->second.scalar_type()) << ", expected " << want.sizes() << " "
                << at::toString(want.scalar_type()) << "\n";
      ++failures;
    }
    loaded.erase(it);
  }
  for (const auto& [name, t] : loaded) {
    std::cerr << "check: " << path << " holds '" << name << "', which was not expected\n";
    ++failures;
  }
  std::cout << "check: " << list.size() << " tensors, " << failures << " failures\n";
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  try {
    if (a.size() >= 4 && a[0] == "save") return save(a[1], std::stoull(a[2]), std::stoll(a[3]), a.size() > 4 ? a[4] : "");
    if (a.size() == 3 && a[0] == "expect") return expect(a[1], std::stoull(a[2]));
    if (a.size() == 3 && a[0] == "check") return check(a[1], a[2]);
  } catch (const std::exception& e) {
    std::cerr << "safetensors_tool: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "usage: safetensors_tool save DIR SEED MAX_SHARD_BYTES [KILL_AT|print] | expect DIR SEED | "
               "check PATH EXPECTED_DIR\n";
  return 2;
}
