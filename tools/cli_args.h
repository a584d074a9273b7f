// A small command-line parser for the `cakemoe` subcommands: typed options with ranges and
// choices, `--name value` and `--name=value`, generated help. Bad input raises UsageError naming
// the flag; the CLI turns it into a message and exit status 2.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cakemoe {
namespace tools {

/// A command line the parser rejects. `flag()` is the offending flag ("--tokens") or argument.
class UsageError : public std::runtime_error {
 public:
  UsageError(std::string flag, const std::string& rule)
      : std::runtime_error(flag + ": " + rule), flag_(std::move(flag)) {}
  const std::string& flag() const { return flag_; }

 private:
  std::string flag_;
};

/// Strict decimal parses: the whole text, in [min, max]; throw UsageError(flag, ...) otherwise.
int64_t parse_int(const std::string& flag, const std::string& text, int64_t min, int64_t max);
uint64_t parse_uint(const std::string& flag, const std::string& text);
/// "1,8,64": a comma-separated list of integers in [min, max], at least one, no empty items.
std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& text, int64_t min,
                                    int64_t max);

class ArgParser {
 public:
  /// `usage` is the synopsis line after "usage: " (e.g. "cakemoe run [options]").
  ArgParser(std::string usage, std::string description);

  void add_flag(const std::string& name, const std::string& help, bool* out);
  void add_int(const std::string& name, const std::string& metavar, const std::string& help,
               int64_t min, int64_t max, int64_t* out);
  void add_uint(const std::string& name, const std::string& metavar, const std::string& help,
                uint64_t* out);
  void add_int_list(const std::string& name, const std::string& metavar, const std::string& help,
                    int64_t min, int64_t max, std::vector<int64_t>* out);
  void add_choice(const std::string& name, const std::string& help,
                  std::vector<std::string> choices, std::string* out);
  void add_string(const std::string& name, const std::string& metavar, const std::string& help,
                  std::string* out);

  /// Parses args (flags only, no positionals). Returns false when -h / --help was given (the
  /// caller prints help() and exits 0); throws UsageError for anything it cannot accept. Outputs
  /// are written only for flags that appear.
  bool parse(const std::vector<std::string>& args) const;
  std::string help() const;

 private:
  struct Option {
    std::string name, metavar, help;
    bool takes_value = true;
    std::function<void(const std::string&)> apply;  // value parse + store (throws UsageError)
  };
  void add(Option option);
  const Option* find(const std::string& name) const;

  std::string usage_, description_;
  std::vector<Option> options_;
};

}  // namespace tools
}  // namespace cakemoe
