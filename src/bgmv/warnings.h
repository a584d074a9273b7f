// Fallback warnings: once per distinct reason per process, through the installable hook.
#pragma once

#include <string>

namespace cakemoe {
namespace bgmv {
namespace detail {

/// Emits fallback_warning(reason) through the hook unless this reason was already reported.
void warn_fallback_once(const std::string& reason);
/// Forgets the reasons already reported (tests only).
void reset_warned_reasons();

}  // namespace detail
}  // namespace bgmv
}  // namespace cakemoe
