// One fuzz input -> one call of a public entry, under the fuzzing contract: returning normally or
// throwing cakemoe::InvalidArgument / cakemoe::Unsupported is fine; any other exception is a bug
// and aborts (so libFuzzer and the plain driver both record the input). Crashes, sanitizer
// reports and hangs are caught by the sanitizers and the drivers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cakemoe {
namespace fuzz {

struct Outcome {
  const char* entry = "";  ///< the entry the input chose
  bool rejected = false;   ///< threw InvalidArgument / Unsupported
  std::string message;     ///< the error's what() when rejected
};

/// Process-wide setup (single-threaded CPU engine, silent BGMV warnings); idempotent.
void init_fuzzing();
/// Runs one input; aborts on a contract violation.
Outcome run_one(const uint8_t* data, size_t size);

}  // namespace fuzz
}  // namespace cakemoe
