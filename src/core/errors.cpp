#include "cakemoe/errors.h"

namespace cakemoe {

Error::Error(std::string argument, std::string rule)
    : std::runtime_error(argument + ": " + rule),
      argument_(std::move(argument)),
      rule_(std::move(rule)) {}

}  // namespace cakemoe
