// cakemoe CLI entry point; the subcommands live in tools/cli.cpp (`cakemoe --help`).
#include <string>
#include <vector>

#include "tools/cli.h"

int main(int argc, char** argv) {
  return cakemoe::tools::cli_main(std::vector<std::string>(argv + 1, argv + argc));
}
