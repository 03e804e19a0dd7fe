// The object format of gather_object / broadcast_object (object_codec.h): literal bytes, round
// trips of every supported type, and the errors of bytes that are not a value of the type asked for.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "xlaunch/error.h"
#include "xlaunch/object_codec.h"

namespace {

namespace codec = xlaunch::object_codec;

std::string bytes(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s += static_cast<char>(b);
  return s;
}

template <typename T>
T round_trip(const T& v) {
  return codec::decode<T>(codec::encode(v), "the test's value");
}

std::string decode_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const xlaunch::UsageError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ObjectCodec, TheBytesOfTheHeadersExamples) {
  EXPECT_EQ(codec::encode(std::string("hi")), bytes({'X', 'L', 'O', 1, 's', 2, 0, 0, 0, 0, 0, 0, 0, 'h', 'i'}));
  EXPECT_EQ(codec::encode(5), bytes({'X', 'L', 'O', 1, 'i', 5, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(codec::encode(-2), bytes({'X', 'L', 'O', 1, 'i', 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}));
  EXPECT_EQ(codec::encode(uint8_t{200}), bytes({'X', 'L', 'O', 1, 'u', 200, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(codec::encode(true), bytes({'X', 'L', 'O', 1, 'b', 1}));
  // 1.0 is 0x3FF0000000000000.
  EXPECT_EQ(codec::encode(1.0f), bytes({'X', 'L', 'O', 1, 'f', 0, 0, 0, 0, 0, 0, 0xf0, 0x3f}));
  EXPECT_EQ(codec::encode(std::vector<bool>{true, false}), bytes({'X', 'L', 'O', 1, 'v', 2, 0, 0, 0, 0, 0, 0, 0, 'b', 1, 'b', 0}));
  EXPECT_EQ(codec::encode(std::map<std::string, bool>{{"b", false}, {"a", true}}),
            bytes({'X', 'L', 'O', 1, 'm', 2, 0, 0, 0, 0, 0, 0, 0,  //
                   1, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 1,            // keys ascending
                   1, 0, 0, 0, 0, 0, 0, 0, 'b', 'b', 0}));
}

TEST(ObjectCodec, EveryTypeRoundTrips) {
  EXPECT_EQ(round_trip(std::numeric_limits<int64_t>::min()), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(round_trip(std::numeric_limits<uint64_t>::max()), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(round_trip(int8_t{-128}), int8_t{-128});
  EXPECT_EQ(round_trip('x'), 'x');
  EXPECT_EQ(round_trip(false), false);
  EXPECT_EQ(round_trip(0.1f), 0.1f);
  EXPECT_EQ(round_trip(-0.1), -0.1);
  EXPECT_TRUE(std::isnan(round_trip(std::nan(""))));
  EXPECT_EQ(round_trip(std::numeric_limits<double>::infinity()), std::numeric_limits<double>::infinity());
  const std::string binary("\0\x01\xff text", 8);
  EXPECT_EQ(round_trip(binary), binary);
  EXPECT_EQ(round_trip(std::string()), std::string());
  using Nested = std::map<std::string, std::vector<std::map<std::string, std::vector<int>>>>;
  const Nested nested{{"", {}}, {"a", {{{"x", {1, -2, 3}}}, {}}}, {std::string("b\0c", 3), {{{"y", {}}}}}};
  EXPECT_EQ(round_trip(nested), nested);
  EXPECT_EQ(round_trip(std::vector<std::vector<bool>>{{true}, {}, {false, true}}),
            (std::vector<std::vector<bool>>{{true}, {}, {false, true}}));
}

TEST(ObjectCodec, AnotherTypeIsRefusedNamingTheValueTheOffsetAndTheTags) {
  const std::string five = codec::encode(5);
  EXPECT_EQ(decode_error([&] { codec::decode<std::string>(five, "rank 2's value"); }),
            "rank 2's value is not a valid xlaunch object (format version 1, 13 bytes): at byte 4, expected "
            "std::string (tag 's') but found tag 'i'. Every rank must pass a value of the same C++ type, and the "
            "bytes must come from object_codec::encode");
  // An integer that fits another integer type is fine; one that does not is refused.
  EXPECT_EQ(codec::decode<uint8_t>(five, "v"), 5);
  EXPECT_NE(decode_error([] { codec::decode<uint8_t>(codec::encode(-1), "v"); }).find("the integer -1 does not fit"),
            std::string::npos);
  EXPECT_NE(decode_error([] { codec::decode<int8_t>(codec::encode(300u), "v"); }).find("the integer 300 does not fit"),
            std::string::npos);
}

TEST(ObjectCodec, BrokenBytesAreRefusedWithoutReadingPastTheEnd) {
  const std::string s = codec::encode(std::vector<int>{1, 2, 3});
  EXPECT_NE(decode_error([&] { codec::decode<std::vector<int>>(s.substr(0, s.size() - 3), "v"); })
                .find("the bytes end inside an 8-byte number"),
            std::string::npos);
  EXPECT_NE(decode_error([&] { codec::decode<std::vector<int>>(s + "x", "v"); }).find("1 bytes are left over"),
            std::string::npos);
  // A huge count is refused before anything is allocated.
  const std::string huge = bytes({'X', 'L', 'O', 1, 'v', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f});
  EXPECT_NE(decode_error([&] { codec::decode<std::vector<int>>(huge, "v"); }).find("but only 0 bytes are left"),
            std::string::npos);
  std::string other_version = s;
  other_version[3] = 2;
  EXPECT_NE(decode_error([&] { codec::decode<std::vector<int>>(other_version, "v"); })
                .find("written in format version 2, which this xlaunch does not read"),
            std::string::npos);
  EXPECT_NE(decode_error([] { codec::decode<int>("JSON", "v"); }).find("the magic bytes 'XLO' are missing"),
            std::string::npos);
  const std::string twice = bytes({'X', 'L', 'O', 1, 'm', 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 1,
                                   1, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 0});
  EXPECT_NE(decode_error([&] { codec::decode<std::map<std::string, bool>>(twice, "v"); })
                .find("the map key 'a' appears twice"),
            std::string::npos);
  EXPECT_NE(decode_error([] { codec::decode<bool>(bytes({'X', 'L', 'O', 1, 'b', 2}), "v"); })
                .find("a bool byte of 2"),
            std::string::npos);
}

}  // namespace
