#include "state/safetensors_format.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <tuple>

namespace xlaunch::safetensors {
namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr DtypeRow kDtypes[] = {
    {"F64", at::kDouble},  {"F32", at::kFloat},  {"F16", at::kHalf},
    {"BF16", at::kBFloat16}, {"F8_E4M3", at::kFloat8_e4m3fn}, {"F8_E5M2", at::kFloat8_e5m2},
    {"I64", at::kLong},    {"I32", at::kInt},    {"I16", at::kShort},
    {"I8", at::kChar},     {"U64", at::ScalarType::UInt64}, {"U32", at::ScalarType::UInt32},
    {"U16", at::ScalarType::UInt16}, {"U8", at::kByte}, {"BOOL", at::kBool},
};

// One header entry, checked: a known dtype, a shape of sizes, offsets whose length fits both.
Entry parse_entry(const std::string& name, const nlohmann::json& info, const fs::path& path) {
  const auto bad = [&](const std::string& why) { return invalid_file(path, "tensor '" + name + "' " + why); };
  if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets"))
    throw bad("lacks one of dtype, shape, data_offsets");
  const auto& dtype = info["dtype"];
  const DtypeRow* row = dtype.is_string() ? row_of(dtype.get<std::string>()) : nullptr;
  if (!row) throw bad("has dtype " + dtype.dump() + ", which this reader does not support");
  Entry e{name, row, {}, 0, 0};
  uint64_t bytes = c10::elementSize(row->type);
  if (!info["shape"].is_array()) throw bad("has a shape that is not a list");
  for (const auto& size : info["shape"]) {
    if (!size.is_number_unsigned()) throw bad("has a shape entry that is not a whole number >= 0: " + size.dump());
    const uint64_t s = size.get<uint64_t>();
    if (s > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(bytes, s, &bytes)) throw bad("is too large");
    e.shape.push_back(static_cast<int64_t>(s));
  }
  const auto& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    throw bad("has data_offsets that are not two whole numbers: " + offsets.dump());
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.end < e.begin || e.end - e.begin != bytes)
    throw bad("has data_offsets " + offsets.dump() + " for " + std::to_string(bytes) + " bytes of " + row->name +
              " data");
  return e;
}

}  // namespace

const DtypeRow* row_of(at::ScalarType t) {
  for (const auto& r : kDtypes)
    if (r.type == t) return &r;
  return nullptr;
}

const DtypeRow* row_of(const std::string& name) {
  for (const auto& r : kDtypes)
    if (name == r.name) return &r;
  return nullptr;
}

int64_t nbytes_of(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

std::string header_of(const std::vector<const std::pair<std::string, at::Tensor>*>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  OrderedJson header;
  header["__metadata__"]["format"] = "pt";
  for (const auto& [key, value] : metadata)
    if (key != "format") header["__metadata__"][key] = value;
  int64_t offset = 0;
  for (const auto* entry : tensors) {
    const at::Tensor& t = entry->second;
    const int64_t end = offset + nbytes_of(t);
    header[entry->first] = {{"dtype", row_of(t.scalar_type())->name}, {"shape", t.sizes().vec()},
                            {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(std::string("save_safetensors: a tensor name or metadata entry is not valid UTF-8 (") + e.what() +
                     "); safetensors headers are JSON, which holds UTF-8 text only");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

UsageError invalid_file(const fs::path& path, const std::string& why) {
  return UsageError("load_safetensors: " + path.string() + " is not a valid safetensors file: " + why);
}

std::vector<Entry> parse_header(const std::string& text, uint64_t data_size, const fs::path& path) {
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw invalid_file(path, std::string("its header is not JSON (") + e.what() + ")");
  }
  if (!header.is_object()) throw invalid_file(path, "its header is not a JSON object");
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name != "__metadata__") {
      entries.push_back(parse_entry(name, info, path));
      continue;
    }
    if (!info.is_object()) throw invalid_file(path, "its __metadata__ is not an object of strings");
    for (const auto& [key, value] : info.items())
      if (!value.is_string()) throw invalid_file(path, "its __metadata__ entry '" + key + "' is not a string");
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t expected = 0;
  for (const Entry& e : entries) {
    if (e.begin != expected)
      throw invalid_file(path, "tensor '" + e.name + "' starts at data offset " + std::to_string(e.begin) +
                                   ", not at " + std::to_string(expected) +
                                   " where the previous one ended (tensors must tile the data)");
    expected = e.end;
  }
  if (expected != data_size)
    throw invalid_file(path, "its tensors cover " + std::to_string(expected) + " bytes of data, and the file holds " +
                                 std::to_string(data_size) + " after the header");
  return entries;
}

Index read_index(uint64_t size, const ReadAt& read, const fs::path& path) {
  if (size < 8)
    throw invalid_file(path, "it has " + std::to_string(size) + " bytes, fewer than the 8 of its header length");
  uint64_t header_length = 0;
  read(0, 8, &header_length);
  if (header_length > kMaxHeaderBytes || header_length > size - 8)
    throw invalid_file(path, "its header length is " + std::to_string(header_length) + " bytes, and the file has " +
                                 std::to_string(size) + " (at most 100 MB of header is read)");
  std::string text(header_length, '\0');
  read(8, header_length, text.data());
  Index out;
  out.data_start = 8 + header_length;
  out.entries = parse_header(text, size - out.data_start, path);
  return out;
}

}  // namespace xlaunch::safetensors
