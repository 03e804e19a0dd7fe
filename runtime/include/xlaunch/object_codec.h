// Values that are not tensors, as bytes: what Accelerator::gather_object and broadcast_object send
// between ranks (and what a program may use to send its own values through a Communicator).
//
// Types: bool; every integer type (signed and unsigned, the char types included); float and
// double; std::string; std::vector<T> and std::map<std::string, T> of any of these, nested to any
// depth (std::vector<std::map<std::string, std::vector<double>>> is fine).
//
// Format, version 1. Integers are little-endian whatever the machine; "count" is 8 bytes.
//
//   object  := "XLO" version value        3 magic bytes, then the version byte (1)
//   value   := tag payload                the tag is one ASCII byte:
//     'b'  bool      1 byte, 0 or 1
//     'i'  signed    8 bytes, two's complement (int8_t ... int64_t; char where it is signed)
//     'u'  unsigned  8 bytes (uint8_t ... uint64_t; char where it is unsigned)
//     'f'  floating  8 bytes, IEEE-754 binary64 (float is widened to double, exactly)
//     's'  string    count, then count bytes (any bytes: NUL and non-UTF-8 travel unchanged)
//     'v'  vector    count, then count values
//     'm'  map       count, then count entries in ascending key order: key length (count),
//                    the key's bytes, the value
//
// So the string "hi" is 58 4C 4F 01 | 73 | 02 00 00 00 00 00 00 00 | 68 69 (3 + 1 + 1 + 8 + 2 = 15
// bytes), and an int 5 is 58 4C 4F 01 | 69 | 05 00 00 00 00 00 00 00.
//
// Decoding checks the magic and the version (another version is refused: its writer is another
// xlaunch), every tag against the type asked for (an integer may come as 'i' or 'u' if its value
// fits the type asked for), every count against the bytes left (a corrupt count never allocates),
// that a map has no key twice, and that nothing is left over. A failure throws UsageError naming
// the value (e.g. "rank 2's value"), the byte offset and what was expected.
//
// Why a format of our own and not MessagePack through nlohmann/json: it is used by templates in
// public headers, and nlohmann/json is a private dependency of the runtime that programs using an
// installed xlaunch do not get; these seven tags are all the types above need.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

namespace xlaunch::object_codec {

inline constexpr char kMagic[3] = {'X', 'L', 'O'};
inline constexpr uint8_t kVersion = 1;

namespace detail {

template <typename T>
struct is_vector : std::false_type {};
template <typename T, typename A>
struct is_vector<std::vector<T, A>> : std::true_type {};
template <typename T>
struct is_string_map : std::false_type {};
template <typename T, typename C, typename A>
struct is_string_map<std::map<std::string, T, C, A>> : std::true_type {};
template <typename T>
inline constexpr bool kUnsupported = false;

void put_u64(std::string& out, uint64_t v);

// Reads one encoded object front to back; every read is bounds-checked and fails with the
// object's name (`what`) and the offset.
class Reader {
 public:
  Reader(const std::string& bytes, std::string what);
  uint8_t byte();
  uint64_t u64();
  // The next tag, which must be `tag`; `type` names the C++ type asked for, in the error.
  void expect(char tag, const char* type);
  char tag();
  // A count of items of at least `min_bytes_each` bytes each, checked against the bytes left.
  uint64_t count(uint64_t min_bytes_each);
  std::string take(uint64_t n);
  void finish();  // nothing may be left over
  [[noreturn]] void fail(const std::string& problem) const;
  size_t offset() const { return pos_; }

 private:
  const std::string& bytes_;
  std::string what_;
  size_t pos_ = 0;
};

template <typename T>
void write(std::string& out, const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    out += 'b';
    out += static_cast<char>(v ? 1 : 0);
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    out += 'i';
    put_u64(out, static_cast<uint64_t>(static_cast<int64_t>(v)));
  } else if constexpr (std::is_integral_v<T>) {
    out += 'u';
    put_u64(out, static_cast<uint64_t>(v));
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    out += 'f';
    const double d = v;
    uint64_t bits = 0;
    std::memcpy(&bits, &d, sizeof bits);
    put_u64(out, bits);
  } else if constexpr (std::is_same_v<T, std::string>) {
    out += 's';
    put_u64(out, v.size());
    out += v;
  } else if constexpr (is_vector<T>::value) {
    out += 'v';
    put_u64(out, v.size());
    for (const auto& e : v) write<typename T::value_type>(out, e);
  } else if constexpr (is_string_map<T>::value) {
    out += 'm';
    put_u64(out, v.size());
    for (const auto& [k, e] : v) {
      put_u64(out, k.size());
      out += k;
      write(out, e);
    }
  } else {
    static_assert(kUnsupported<T>, "object_codec: supported types are bool, integers, float, double, std::string, "
                                   "and std::vector / std::map<std::string, ...> of them");
  }
}

template <typename T, typename Wide>
bool fits(Wide x) {
  if constexpr (std::is_signed_v<Wide>) {
    if constexpr (std::is_signed_v<T>)
      return x >= static_cast<Wide>(std::numeric_limits<T>::min()) && x <= static_cast<Wide>(std::numeric_limits<T>::max());
    else
      return x >= 0 && static_cast<uint64_t>(x) <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  } else {
    return x <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  }
}

template <typename T>
T read(Reader& in) {
  if constexpr (std::is_same_v<T, bool>) {
    in.expect('b', "bool");
    const uint8_t b = in.byte();
    if (b > 1) in.fail("a bool byte of " + std::to_string(b) + " (must be 0 or 1)");
    return b == 1;
  } else if constexpr (std::is_integral_v<T>) {
    const char tag = in.tag();
    if (tag == 'i') {
      const auto x = static_cast<int64_t>(in.u64());
      if (!fits<T>(x)) in.fail("the integer " + std::to_string(x) + " does not fit the type asked for");
      return static_cast<T>(x);
    }
    if (tag != 'u') in.fail(std::string("expected an integer ('i' or 'u') but found tag '") + tag + "'");
    const uint64_t x = in.u64();
    if (!fits<T>(x)) in.fail("the integer " + std::to_string(x) + " does not fit the type asked for");
    return static_cast<T>(x);
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    in.expect('f', "floating point");
    const uint64_t bits = in.u64();
    double d = 0;
    std::memcpy(&d, &bits, sizeof d);
    return static_cast<T>(d);
  } else if constexpr (std::is_same_v<T, std::string>) {
    in.expect('s', "std::string");
    return in.take(in.count(1));
  } else if constexpr (is_vector<T>::value) {
    in.expect('v', "std::vector");
    const uint64_t n = in.count(2);  // the smallest value, a bool, is 2 bytes
    T out;
    out.reserve(n);
    for (uint64_t i = 0; i < n; ++i) out.push_back(read<typename T::value_type>(in));
    return out;
  } else if constexpr (is_string_map<T>::value) {
    in.expect('m', "std::map<std::string, ...>");
    const uint64_t n = in.count(8 + 2);  // a key's length and the smallest value
    T out;
    for (uint64_t i = 0; i < n; ++i) {
      std::string key = in.take(in.count(1));
      auto value = read<typename T::mapped_type>(in);
      if (!out.emplace(key, std::move(value)).second) in.fail("the map key '" + key + "' appears twice");
    }
    return out;
  } else {
    static_assert(kUnsupported<T>, "object_codec: supported types are bool, integers, float, double, std::string, "
                                   "and std::vector / std::map<std::string, ...> of them");
  }
}

// Checks the magic and the version; throws through `in` otherwise.
void read_header(Reader& in);

}  // namespace detail

// `value` in the format above.
template <typename T>
std::string encode(const T& value) {
  std::string out(kMagic, sizeof kMagic);
  out += static_cast<char>(kVersion);
  detail::write(out, value);
  return out;
}

// The value `bytes` encodes, which must be a T; `what` names it in errors ("rank 2's value").
template <typename T>
T decode(const std::string& bytes, const std::string& what) {
  detail::Reader in(bytes, what);
  detail::read_header(in);
  T value = detail::read<T>(in);
  in.finish();
  return value;
}

}  // namespace xlaunch::object_codec
