// Names of the StepFun weight families and scale-factor layouts (spec stepfun §4.2, §4.4).
#include <string>

#include "cakemoe/stepfun.h"
#include "core/check.h"
#include "reference/stepfun/families.h"

namespace cakemoe {
namespace stepfun {
const char* family_name(Family family) {
  switch (family) {
    case Family::kBF16: return "bf16";
    case Family::kFP8: return "fp8";
    case Family::kMXFP8: return "mxfp8";
    case Family::kNVFP4: return "nvfp4";
    case Family::kNVFP4BF16Tok: return "nvfp4_bf16tok";
  }
  return "unknown";
}

Family parse_family(const std::string& name) {
  std::string valid;
  for (Family f : kAllFamilies) {
    if (name == family_name(f)) return f;
    valid += (valid.empty() ? "" : ", ") + std::string(family_name(f));
  }
  throw InvalidArgument("family", "unknown family '" + name + "'; valid names: " + valid);
}

const char* sf_layout_name(SfLayout layout) {
  switch (layout) {
    case SfLayout::kLinear: return "linear";
    case SfLayout::kR8C4: return "r8c4";
    case SfLayout::kR128C4: return "r128c4";
  }
  return "unknown";
}

}  // namespace stepfun
}  // namespace cakemoe
