#include "xlaunch/object_codec.h"

#include <utility>

#include "xlaunch/error.h"

namespace xlaunch::object_codec::detail {

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

Reader::Reader(const std::string& bytes, std::string what) : bytes_(bytes), what_(std::move(what)) {}

void Reader::fail(const std::string& problem) const {
  throw UsageError(what_ + " is not a valid xlaunch object (format version " + std::to_string(kVersion) + ", " +
                   std::to_string(bytes_.size()) + " bytes): at byte " + std::to_string(pos_) + ", " + problem +
                   ". Every rank must pass a value of the same C++ type, and the bytes must come from "
                   "object_codec::encode");
}

uint8_t Reader::byte() {
  if (pos_ >= bytes_.size()) fail("the bytes end where one more was expected");
  return static_cast<uint8_t>(bytes_[pos_++]);
}

uint64_t Reader::u64() {
  if (bytes_.size() - pos_ < 8) fail("the bytes end inside an 8-byte number");
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes_[pos_ + i])) << (8 * i);
  pos_ += 8;
  return v;
}

char Reader::tag() { return static_cast<char>(byte()); }

void Reader::expect(char want, const char* type) {
  const char got = tag();
  if (got != want) {
    --pos_;  // the offset of the tag itself
    fail(std::string("expected ") + type + " (tag '" + want + "') but found tag '" + got + "'");
  }
}

uint64_t Reader::count(uint64_t min_bytes_each) {
  const uint64_t n = u64();
  const uint64_t left = bytes_.size() - pos_;
  if (n > left / min_bytes_each)
    fail("a count of " + std::to_string(n) + " items, but only " + std::to_string(left) + " bytes are left");
  return n;
}

std::string Reader::take(uint64_t n) {
  std::string s = bytes_.substr(pos_, n);  // count() checked n against the bytes left
  pos_ += n;
  return s;
}

void Reader::finish() {
  if (pos_ != bytes_.size()) fail(std::to_string(bytes_.size() - pos_) + " bytes are left over after the value");
}

void read_header(Reader& in) {
  for (char m : kMagic)
    if (static_cast<char>(in.byte()) != m) in.fail("the magic bytes 'XLO' are missing");
  const uint8_t version = in.byte();
  if (version != kVersion)
    in.fail("written in format version " + std::to_string(version) + ", which this xlaunch does not read; run "
            "every rank with the same xlaunch");
}

}  // namespace xlaunch::object_codec::detail
