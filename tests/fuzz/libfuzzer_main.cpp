// libFuzzer entry points (clang, -fsanitize=fuzzer,address,undefined).
#include <cstddef>
#include <cstdint>

#include "fuzz_one.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cakemoe::fuzz::init_fuzzing();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cakemoe::fuzz::run_one(data, size);
  return 0;
}
