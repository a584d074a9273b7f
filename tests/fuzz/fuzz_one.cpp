#include "fuzz_one.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <stdexcept>
#include <typeinfo>

#include "cakemoe/bgmv.h"
#include "cakemoe/errors.h"
#include "fuzz_entries.h"

namespace cakemoe {
namespace fuzz {

namespace {

constexpr Entry kEntries[] = {
    {"tensor_view", fuzz_tensor_view},
    {"tensor_empty", fuzz_tensor_empty},
    {"bounds", fuzz_bounds},
    {"plans", fuzz_plans},
    {"routing", fuzz_routing},
    {"fc1", fuzz_fc1},
    {"requant", fuzz_requant},
    {"fc2", fuzz_fc2},
    {"finalize", fuzz_finalize},
    {"moe", fuzz_moe},
    {"prepare_weights", fuzz_prepare_weights},
    {"prepare_activations", fuzz_prepare_activations},
    {"bgmv", fuzz_bgmv},
    {"config", fuzz_config},
    {"config_layer", fuzz_config_layer},
    {"handles", fuzz_handles},
};

// Strict mode (CAKEMOE_FUZZ_STRICT=1): a call that returns normally although one of its
// arguments was an invalid view (fuzz_arena.h) is a failure too.
bool g_strict = false;

[[noreturn]] void contract_violation(const char* entry, const std::string& what) {
  std::fprintf(stderr, "cakemoe fuzz: entry %s: %s\n", entry, what.c_str());
  std::fflush(stderr);
  std::abort();
}

[[noreturn]] void escaped(const char* entry, const char* kind, const char* what) {
  contract_violation(entry, std::string(kind) + " escaped: " + what);
}

}  // namespace

const Entry* entries() { return kEntries; }
int num_entries() { return static_cast<int>(sizeof(kEntries) / sizeof(kEntries[0])); }

void init_fuzzing() {
  // NOTE: one worker per call: thread start-up would dominate small calls, and a
  // single-threaded engine makes reports deterministic. An explicit setting wins.
  setenv("CAKEMOE_NUM_THREADS", "1", 0);
  bgmv::set_warning_hook([](const std::string&) {});
  const char* strict = std::getenv("CAKEMOE_FUZZ_STRICT");
  g_strict = strict != nullptr && std::string(strict) == "1";
}

Outcome run_one(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const Entry& entry = kEntries[in.byte() % num_entries()];
  Outcome outcome;
  outcome.entry = entry.name;
  Arena arena(in, in.byte());
  try {
    entry.run(in, arena);
  } catch (const InvalidArgument& e) {
    outcome.rejected = true;
    outcome.message = std::string("InvalidArgument: ") + e.what();
  } catch (const Unsupported& e) {
    outcome.rejected = true;
    outcome.message = std::string("Unsupported: ") + e.what();
  } catch (const Error& e) {
    escaped(entry.name, typeid(e).name(), e.what());
  } catch (const std::bad_alloc& e) {
    escaped(entry.name, "std::bad_alloc", e.what());
  } catch (const std::length_error& e) {
    escaped(entry.name, "std::length_error", e.what());
  } catch (const std::exception& e) {
    escaped(entry.name, typeid(e).name(), e.what());
  } catch (...) {
    escaped(entry.name, "a non-std exception", "?");
  }
  if (g_strict && !outcome.rejected && !arena.views_unused() &&
      !arena.first_invalid_view().empty()) {
    contract_violation(entry.name, "accepted an invalid " + arena.first_invalid_view());
  }
  return outcome;
}

}  // namespace fuzz
}  // namespace cakemoe

// ASan defaults of both drivers (ASAN_OPTIONS still wins): leaks are bugs, and so is any single
// allocation over 2 GiB: the fuzzer's own buffers stay under 64 MiB, so such a request means the
// library sized something from unchecked arguments.
extern "C" const char* __asan_default_options() {
  return "detect_leaks=1:max_allocation_size_mb=2048";
}
