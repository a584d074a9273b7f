#include "tools/cli_args.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <utility>

namespace cakemoe {
namespace tools {

namespace {

std::string quoted(const std::string& text) { return "'" + text + "'"; }

bool all_digits(const std::string& text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

int64_t parse_int(const std::string& flag, const std::string& text, int64_t min, int64_t max) {
  const bool negative = !text.empty() && text[0] == '-';
  const std::string digits = negative ? text.substr(1) : text;
  const std::string range = "[" + std::to_string(min) + ", " + std::to_string(max) + "]";
  if (!all_digits(digits)) {
    throw UsageError(flag, quoted(text) + " is not an integer (expected one in " + range + ")");
  }
  errno = 0;
  const long long value = std::strtoll(text.c_str(), nullptr, 10);
  if (errno == ERANGE || value < min || value > max) {
    throw UsageError(flag, quoted(text) + " is out of range: it must be in " + range);
  }
  return value;
}

uint64_t parse_uint(const std::string& flag, const std::string& text) {
  if (!all_digits(text)) {
    throw UsageError(flag, quoted(text) + " is not a non-negative integer");
  }
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE) {
    throw UsageError(flag, quoted(text) + " is out of range: it must be below 2^64");
  }
  return value;
}

std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& text, int64_t min,
                                    int64_t max) {
  std::vector<int64_t> values;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    if (item.empty()) {
      throw UsageError(flag, quoted(text) + " has an empty item (expected e.g. 1,8,64)");
    }
    values.push_back(parse_int(flag, item, min, max));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return values;
}

ArgParser::ArgParser(std::string usage, std::string description)
    : usage_(std::move(usage)), description_(std::move(description)) {}

void ArgParser::add(Option option) { options_.push_back(std::move(option)); }

void ArgParser::add_flag(const std::string& name, const std::string& help, bool* out) {
  add({name, "", help, false, [out](const std::string&) { *out = true; }});
}

void ArgParser::add_int(const std::string& name, const std::string& metavar,
                        const std::string& help, int64_t min, int64_t max, int64_t* out) {
  add({name, metavar, help, true,
       [=](const std::string& v) { *out = parse_int(name, v, min, max); }});
}

void ArgParser::add_uint(const std::string& name, const std::string& metavar,
                         const std::string& help, uint64_t* out) {
  add({name, metavar, help, true, [=](const std::string& v) { *out = parse_uint(name, v); }});
}

void ArgParser::add_int_list(const std::string& name, const std::string& metavar,
                             const std::string& help, int64_t min, int64_t max,
                             std::vector<int64_t>* out) {
  add({name, metavar, help, true,
       [=](const std::string& v) { *out = parse_int_list(name, v, min, max); }});
}

void ArgParser::add_choice(const std::string& name, const std::string& help,
                           std::vector<std::string> choices, std::string* out) {
  std::string metavar;
  for (const std::string& c : choices) metavar += (metavar.empty() ? "" : "|") + c;
  add({name, metavar, help, true, [=](const std::string& v) {
         if (std::find(choices.begin(), choices.end(), v) == choices.end()) {
           throw UsageError(name, quoted(v) + " is not one of " + metavar);
         }
         *out = v;
       }});
}

void ArgParser::add_string(const std::string& name, const std::string& metavar,
                           const std::string& help, std::string* out) {
  add({name, metavar, help, true, [=](const std::string& v) {
         if (v.empty()) throw UsageError(name, "needs a non-empty value");
         *out = v;
       }});
}

const ArgParser::Option* ArgParser::find(const std::string& name) const {
  for (const Option& o : options_) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

bool ArgParser::parse(const std::vector<std::string>& args) const {
  // NOTE: help wins wherever it appears, so `cakemoe run --tokens x --help` still prints help.
  for (const std::string& a : args) {
    if (a == "-h" || a == "--help") return false;
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      throw UsageError(arg, "unexpected argument (options start with --; see --help)");
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const Option* option = find(name);
    if (option == nullptr) throw UsageError(name, "unknown option (see --help)");
    if (!option->takes_value) {
      if (eq != std::string::npos) throw UsageError(name, "takes no value");
      option->apply("");
    } else if (eq != std::string::npos) {
      option->apply(arg.substr(eq + 1));
    } else if (i + 1 < args.size()) {
      option->apply(args[++i]);
    } else {
      throw UsageError(name, "needs a value (" + option->metavar + ")");
    }
  }
  return true;
}

std::string ArgParser::help() const {
  constexpr size_t kIndent = 24, kWidth = 96;
  std::string text = "usage: " + usage_ + "\n\n" + description_ + "\n\noptions:\n";
  auto entry = [&](std::string head, const std::string& help) {
    head = "  " + head;
    head += head.size() < kIndent ? std::string(kIndent - head.size(), ' ')
                                  : "\n" + std::string(kIndent, ' ');
    // Word-wrapped help, continuation lines indented under the first.
    size_t column = kIndent, start = 0;
    while (start < help.size()) {
      size_t end = help.find(' ', start);
      if (end == std::string::npos) end = help.size();
      const std::string word = help.substr(start, end - start);
      if (column > kIndent && column + 1 + word.size() > kWidth) {
        head += "\n" + std::string(kIndent, ' ');
        column = kIndent;
      } else if (column > kIndent) {
        head += ' ';
        ++column;
      }
      head += word;
      column += word.size();
      start = end + 1;
    }
    text += head + "\n";
  };
  for (const Option& o : options_)
    entry(o.name + (o.metavar.empty() ? "" : " " + o.metavar), o.help);
  entry("-h, --help", "this text");
  return text;
}

}  // namespace tools
}  // namespace cakemoe
