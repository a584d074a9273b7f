#include "bgmv/warnings.h"

#include <cstdio>
#include <mutex>
#include <set>

#include "bgmv/plan.h"
#include "cakemoe/bgmv.h"

namespace cakemoe {
namespace bgmv {
namespace {

struct WarningState {
  std::mutex mutex;
  WarningHook hook;  // empty: the default stderr hook
  std::set<std::string> reported;
};

WarningState& state() {
  static WarningState s;
  return s;
}

}  // namespace

WarningHook set_warning_hook(WarningHook hook) {
  WarningState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  WarningHook previous = std::move(s.hook);
  s.hook = std::move(hook);
  return previous;
}

namespace detail {

void warn_fallback_once(const std::string& reason) {
  WarningState& s = state();
  WarningHook hook;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.reported.insert(reason).second) return;
    hook = s.hook;
  }
  const std::string message = fallback_warning(reason);
  if (hook) {
    hook(message);
  } else {
    std::fprintf(stderr, "cakemoe warning: %s\n", message.c_str());
  }
}

void reset_warned_reasons() {
  WarningState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.reported.clear();
}

}  // namespace detail
}  // namespace bgmv
}  // namespace cakemoe
