// The `cakemoe` command line: subcommands `run` (the main job) and `bench`, on tools/cli_args.h.
#pragma once

#include <string>
#include <vector>

namespace cakemoe {
namespace tools {

/// Exit statuses of the CLI.
constexpr int kExitOk = 0;      ///< done (or help printed)
constexpr int kExitFailed = 1;  ///< a check failed or the library raised an error
constexpr int kExitUsage = 2;   ///< the command line was rejected

/// Runs `cakemoe <args...>` (args without the program name) and returns its exit status. Usage
/// errors go to stderr with the flag they concern; results go to stdout, progress to stderr.
int cli_main(const std::vector<std::string>& args);

}  // namespace tools
}  // namespace cakemoe
