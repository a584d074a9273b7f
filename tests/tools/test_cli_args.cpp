// The CLI's argument parser (tools/cli_args.h): strict typed values, ranges, choices, help, and
// a UsageError naming the flag for everything it cannot accept.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tools/cli_args.h"

namespace cakemoe {
namespace tools {
namespace {

/// The flag a UsageError names, or "" when `fn` does not throw one.
template <typename Fn>
std::string usage_error_flag(Fn fn) {
  try {
    fn();
  } catch (const UsageError& e) {
    return e.flag();
  }
  return "";
}

TEST(CliParseInt, AcceptsDecimalsInRange) {
  EXPECT_EQ(parse_int("--n", "1", 1, 16384), 1);
  EXPECT_EQ(parse_int("--n", "16384", 1, 16384), 16384);
  EXPECT_EQ(parse_int("--n", "-3", -5, 5), -3);
}

TEST(CliParseInt, RejectsTextRangeAndOverflow) {
  for (const char* bad : {"", "abc", "12x", "1.5", "+4", " 4", "4 ", "-", "0x10"}) {
    EXPECT_EQ(usage_error_flag([&] { parse_int("--tokens", bad, 1, 100); }), "--tokens") << bad;
  }
  for (const char* bad : {"0", "101", "-1", "99999999999", "99999999999999999999999"}) {
    EXPECT_EQ(usage_error_flag([&] { parse_int("--tokens", bad, 1, 100); }), "--tokens") << bad;
  }
  try {
    parse_int("--tokens", "99999999999", 1, 16384);
    FAIL() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("[1, 16384]"), std::string::npos) << e.what();
  }
}

TEST(CliParseUint, FullRangeNoSign) {
  EXPECT_EQ(parse_uint("--seed", "18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(parse_uint("--seed", "0"), 0u);
  for (const char* bad : {"-1", "18446744073709551616", "1e3", ""}) {
    EXPECT_EQ(usage_error_flag([&] { parse_uint("--seed", bad); }), "--seed") << bad;
  }
}

TEST(CliParseIntList, CommaSeparatedItemsInRange) {
  EXPECT_EQ(parse_int_list("--tokens", "1,8,64", 1, 100), (std::vector<int64_t>{1, 8, 64}));
  EXPECT_EQ(parse_int_list("--tokens", "7", 1, 100), (std::vector<int64_t>{7}));
  for (const char* bad : {"", ",", "1,", ",1", "1,,8", "1,x", "1,200"}) {
    EXPECT_EQ(usage_error_flag([&] { parse_int_list("--tokens", bad, 1, 100); }), "--tokens")
        << bad;
  }
}

struct Parsed {
  bool flag = false;
  int64_t count = 5;
  uint64_t seed = 9;
  std::string mode = "a";
  std::string path;
  std::vector<int64_t> list = {3};
};

ArgParser make_parser(Parsed* p) {
  ArgParser parser("tool [options]", "A test tool.");
  parser.add_flag("--flag", "a flag", &p->flag);
  parser.add_int("--count", "N", "a count", 1, 10, &p->count);
  parser.add_uint("--seed", "S", "a seed", &p->seed);
  parser.add_choice("--mode", "a mode", {"a", "b"}, &p->mode);
  parser.add_string("--path", "PATH", "a path", &p->path);
  parser.add_int_list("--list", "L", "a list", 1, 10, &p->list);
  return parser;
}

TEST(CliArgParser, BothValueSpellingsAndDefaults) {
  Parsed p;
  const ArgParser parser = make_parser(&p);
  EXPECT_TRUE(parser.parse({"--count", "7", "--mode=b", "--flag", "--list=1,2"}));
  EXPECT_TRUE(p.flag);
  EXPECT_EQ(p.count, 7);
  EXPECT_EQ(p.mode, "b");
  EXPECT_EQ(p.list, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(p.seed, 9u);  // absent: untouched
  EXPECT_EQ(p.path, "");
}

TEST(CliArgParser, EveryRejectionNamesTheFlag) {
  Parsed p;
  const ArgParser parser = make_parser(&p);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--count", "0"}, "--count"},  {{"--count", "x"}, "--count"},
      {{"--count"}, "--count"},       {{"--count="}, "--count"},
      {{"--mode", "c"}, "--mode"},    {{"--flag=1"}, "--flag"},
      {{"--nope"}, "--nope"},         {{"--nope=3"}, "--nope"},
      {{"stray"}, "stray"},           {{"-x"}, "-x"},
      {{"--path="}, "--path"},        {{"--seed", "-2"}, "--seed"},
      {{"--list", "1,,2"}, "--list"}, {{"--flag", "--count", "11"}, "--count"},
  };
  for (const auto& c : cases) {
    // NOTE: not a structured binding: C++17 lambdas cannot capture those (clang rejects it).
    const auto& args = c.first;
    EXPECT_EQ(usage_error_flag([&] { parser.parse(args); }), c.second) << args[0];
  }
}

TEST(CliArgParser, HelpWinsAndListsEveryOption) {
  Parsed p;
  const ArgParser parser = make_parser(&p);
  EXPECT_FALSE(parser.parse({"--help"}));
  EXPECT_FALSE(parser.parse({"--count", "999", "-h"}));  // help even next to a bad value
  EXPECT_EQ(p.count, 5);
  const std::string help = parser.help();
  for (const char* name : {"usage: tool [options]", "--flag", "--count N", "--seed S", "--mode a|b",
                           "--path PATH", "--list L", "-h, --help"}) {
    EXPECT_NE(help.find(name), std::string::npos) << name;
  }
  for (size_t start = 0, end; start < help.size(); start = end + 1) {
    end = help.find('\n', start);
    if (end == std::string::npos) end = help.size();
    EXPECT_LE(end - start, 100u) << help.substr(start, end - start);
  }
}

}  // namespace
}  // namespace tools
}  // namespace cakemoe
