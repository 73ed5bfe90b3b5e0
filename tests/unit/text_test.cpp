// printable(): text from outside kfab as valid UTF-8 that prints harmlessly, cut to a length; and
// dump_json(), which never throws on such text (issue 20: bytes that ended kfab with exit 3).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>
#include <string>

#include "core/text.h"

namespace kfab {
namespace {

const std::string kBad = "\xEF\xBF\xBD";  // U+FFFD

/// Whether nlohmann's strict dump, the one that threw, takes `s` as it is.
bool valid_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

TEST(Printable, KeepsValidTextAsItIs) {
  const std::string s = "plain ASCII, caf\xC3\xA9, \xE2\x82\xAC 5, \xF0\x9D\x84\x9E, tab\tand\nnewlines\r\n";
  EXPECT_EQ(printable(s), s);
  EXPECT_EQ(printable(""), "");
}

TEST(Printable, ReplacesEachInvalidByte) {
  EXPECT_EQ(printable("a\xFF\xFE" "b"), "a" + kBad + kBad + "b");
  EXPECT_EQ(printable("\x80"), kBad) << "a continuation byte with no lead";
  EXPECT_EQ(printable("\xC0\xAF"), kBad + kBad) << "an overlong '/': C0 never begins a sequence";
  EXPECT_EQ(printable("\xE0\x80\xAF"), kBad + kBad + kBad) << "an overlong three-byte form";
  EXPECT_EQ(printable("\xED\xA0\x80"), kBad + kBad + kBad) << "a UTF-16 surrogate";
  EXPECT_EQ(printable("\xF4\x90\x80\x80"), kBad + kBad + kBad + kBad) << "past U+10FFFF";
  EXPECT_EQ(printable("\xF5\xF8\xFC"), kBad + kBad + kBad);
}

TEST(Printable, ASequenceCutShortIsOneReplacement) {
  EXPECT_EQ(printable("x\xE2\x82"), "x" + kBad) << "the euro sign without its last byte, at the end";
  EXPECT_EQ(printable("\xE2\x82y"), kBad + "y") << "in the middle: the next character survives";
  EXPECT_EQ(printable("\xF0\x9F\x98"), kBad);
  EXPECT_EQ(printable("\xF0\x9F\xE2\x82\xAC"), kBad + "\xE2\x82\xAC") << "a new lead byte ends the cut sequence";
}

TEST(Printable, ReplacesControlCharactersButTabNewlineAndReturn) {
  EXPECT_EQ(printable(std::string("a\x1B[31mb\0c\x07", 10)), "a" + kBad + "[31mb" + kBad + "c" + kBad);
  EXPECT_EQ(printable("\t\n\r"), "\t\n\r");
}

TEST(Printable, CutsLongTextAtACharacterBoundaryAndSaysSo) {
  EXPECT_EQ(printable(std::string(10000, 'a'), 100), std::string(100, 'a') + " [... 9900 more bytes cut]");
  std::string euros;
  for (int i = 0; i < 100; ++i) euros += "\xE2\x82\xAC";  // 3 bytes each
  const std::string head = printable(euros, 100);
  EXPECT_EQ(head.substr(0, 99), euros.substr(0, 99)) << "33 whole characters, not 100 bytes";
  EXPECT_EQ(head.substr(99), " [... 201 more bytes cut]");
  const std::string tail = printable("first " + std::string(50, 'b') + " last", 10, Keep::Tail);
  EXPECT_EQ(tail, "[... 51 bytes cut] bbbbb last");
  const std::string tail_euros = printable(euros, 100, Keep::Tail);
  EXPECT_EQ(tail_euros, "[... 201 bytes cut] " + euros.substr(0, 99));
  EXPECT_EQ(printable("short", 100), "short");
  EXPECT_EQ(printable("exact", 5), "exact");
}

TEST(Printable, TheLimitCountsTheReplacements) {
  // 0xFF grows to three bytes: 40 of them are 120, cut to 30, 10 whole replacements
  EXPECT_EQ(printable(std::string(40, '\xFF'), 30), [] {
    std::string s;
    for (int i = 0; i < 10; ++i) s += kBad;
    return s + " [... 90 more bytes cut]";
  }());
}

TEST(Printable, AnyBytesComeOutValid) {
  std::mt19937 rng(20);
  for (int i = 0; i < 2000; ++i) {
    std::string s(static_cast<size_t>(rng() % 64), '\0');
    for (char& c : s) c = static_cast<char>(rng() % 256);
    const size_t max = rng() % 80;
    const Keep keep = rng() % 2 ? Keep::Head : Keep::Tail;
    const std::string p = printable(s, max, keep);
    ASSERT_TRUE(valid_utf8(p)) << "input " << i;
    ASSERT_EQ(printable(p), p) << "printable text is a fixed point";
  }
}

TEST(DumpJson, WritesInvalidBytesAsReplacementsWhereDumpThrew) {
  const nlohmann::json j = {{"detail", "crashed; its output ended with: \xFF\xFE"}};
  EXPECT_FALSE(valid_utf8(j["detail"].get<std::string>()));
  const std::string text = dump_json(j);
  EXPECT_EQ(text, "{\"detail\":\"crashed; its output ended with: " + kBad + kBad + "\"}");
  EXPECT_EQ(nlohmann::json::parse(text)["detail"], "crashed; its output ended with: " + kBad + kBad);
  EXPECT_EQ(dump_json(nlohmann::json{{"a", 1}}, 2), "{\n  \"a\": 1\n}");
}

TEST(Split, PiecesWithoutTheirSpacesAndNoEmptyOnes) {
  EXPECT_EQ(split("0, 1,,2 ", ','), (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(split("  sh  -c ", ' '), (std::vector<std::string>{"sh", "-c"}));
  EXPECT_TRUE(split("", ',').empty());
}

}  // namespace
}  // namespace kfab
