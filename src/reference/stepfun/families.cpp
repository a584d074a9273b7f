// Range checks of the public StepFun enums (a cast integer may name no value).
#include "reference/stepfun/families.h"

#include <string>

#include "core/check.h"

namespace cakemoe {
namespace stepfun {

void check_family(Family family, const std::string& arg) {
  core::require(static_cast<unsigned>(family) <= static_cast<unsigned>(Family::kNVFP4BF16Tok), arg,
                "is not a Family value (" + std::to_string(static_cast<unsigned>(family)) + ")");
}

void check_sf_layout(SfLayout layout, const std::string& arg) {
  core::require(static_cast<unsigned>(layout) <= static_cast<unsigned>(SfLayout::kR128C4), arg,
                "is not an SfLayout value (" + std::to_string(static_cast<unsigned>(layout)) + ")");
}

}  // namespace stepfun
}  // namespace cakemoe
