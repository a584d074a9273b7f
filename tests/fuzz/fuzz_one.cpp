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

[[noreturn]] void contract_violation(const char* entry, const char* kind, const char* what) {
  std::fprintf(stderr, "cakemoe fuzz: entry %s: %s escaped: %s\n", entry, kind, what);
  std::fflush(stderr);
  std::abort();
}

}  // namespace

const Entry* entries() { return kEntries; }
int num_entries() { return static_cast<int>(sizeof(kEntries) / sizeof(kEntries[0])); }

void init_fuzzing() {
  // NOTE: one worker per call: thread start-up would dominate small calls, and a
  // single-threaded engine makes reports deterministic. An explicit setting wins.
  setenv("CAKEMOE_NUM_THREADS", "1", 0);
  bgmv::set_warning_hook([](const std::string&) {});
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
    contract_violation(entry.name, typeid(e).name(), e.what());
  } catch (const std::bad_alloc& e) {
    contract_violation(entry.name, "std::bad_alloc", e.what());
  } catch (const std::length_error& e) {
    contract_violation(entry.name, "std::length_error", e.what());
  } catch (const std::exception& e) {
    contract_violation(entry.name, typeid(e).name(), e.what());
  } catch (...) {
    contract_violation(entry.name, "a non-std exception", "?");
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
