// The text of `kjit ... --json`: scripts parse it, so its shape is pinned here (it is what the
// tool printed through protobuf's JSON printer before it used nlohmann::json values).
#include "cli/json.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace kjit::cli {
namespace {

TEST(CliJson, FieldsKeepTheirOrderWithOneSpaceIndentation) {
  Json doc = {{"zeta", 1}, {"alpha", Json::array()}, {"list", {true, Json::object(), "x"}}};
  doc["added"] = Json{{"b", false}};
  EXPECT_EQ(JsonText(doc),
            "{\n \"zeta\": 1,\n \"alpha\": [],\n \"list\": [\n  true,\n  {},\n  \"x\"\n ],\n"
            " \"added\": {\n  \"b\": false\n }\n}");
}

TEST(CliJson, NumbersPrintAsDoublesInTheirShortestRoundTripForm) {
  const auto text = [](const Json& v) { return JsonText(Json{{"n", v}}).substr(8); };
  EXPECT_EQ(text(5), "5\n}");
  EXPECT_EQ(text(5.0), "5\n}");
  EXPECT_EQ(text(uint64_t{1764400000}), "1764400000\n}");
  EXPECT_EQ(text(int64_t{-42}), "-42\n}");
  EXPECT_EQ(text(0.1), "0.1\n}");
  EXPECT_EQ(text(123.456), "123.456\n}");
  EXPECT_EQ(text(0.30000000000000004), "0.30000000000000004\n}");
  EXPECT_EQ(text(1234567890123456.0), "1234567890123456\n}");
  EXPECT_EQ(text(1e16), "1e+16\n}");
  EXPECT_EQ(text(1e-7), "1e-07\n}");
  EXPECT_EQ(text(std::numeric_limits<uint64_t>::max()), "1.8446744073709552e+19\n}");
  EXPECT_EQ(text(std::nan("")), "\"NaN\"\n}");
  EXPECT_EQ(text(-INFINITY), "\"-Infinity\"\n}");
}

TEST(CliJson, StringsEscapeControlsHtmlAndInvisibleCharacters) {
  const auto text = [](const std::string& s) { return JsonText(Json{{"s", s}}).substr(8); };
  EXPECT_EQ(text("kjit::mla_verify_split<8, false>"), "\"kjit::mla_verify_split\\u003c8, false\\u003e\"\n}");
  EXPECT_EQ(text("a\"b\\c/d'e&f"), "\"a\\\"b\\\\c/d'e&f\"\n}");
  EXPECT_EQ(text(std::string("\b\f\n\r\t\x01\x1f\x7f", 8)), "\"\\b\\f\\n\\r\\t\\u0001\\u001f\\u007f\"\n}");
  EXPECT_EQ(text(std::string("\0", 1)), "\"\\u0000\"\n}");
  EXPECT_EQ(text("\xc2\x85 \xc2\xad \xe2\x80\x8b \xe2\x80\xa8 \xef\xbb\xbf"),
            "\"\\u0085 \\u00ad \\u200b \\u2028 \\ufeff\"\n}");
  EXPECT_EQ(text("\xf3\xa0\x80\x81"), "\"\\udb40\\udc01\"\n}");             // U+E0001, a tag
  EXPECT_EQ(text("caf\xc3\xa9 \xf0\x9f\x98\x80"), "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"\n}");  // printable: raw
  EXPECT_EQ(text("a\xff" "b\xe2\x80"), "\"a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd\"\n}");
  EXPECT_EQ(JsonText(Json{{"<k>", 1}}), "{\n \"\\u003ck\\u003e\": 1\n}");
}

}  // namespace
}  // namespace kjit::cli
