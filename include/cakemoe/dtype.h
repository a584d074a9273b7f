// cakemoe public API: element types.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cakemoe {

/// Element type of a tensor. `kE2M1x2` is one byte holding two packed e2m1 values
/// (element 2i in the low nibble, 2i+1 in the high nibble; spec stepfun §4.1).
enum class DType : uint8_t {
  kBF16,
  kFP16,
  kFP32,
  kE4M3,    ///< float8_e4m3fn
  kUE8M0,   ///< power-of-two scale byte, value 2^(code-127)
  kE2M1x2,  ///< two packed e2m1 values per byte
  kUInt8,
  kInt32,
  kInt64,
};

/// Bytes per stored element (kE2M1x2: 1 byte = 2 values).
size_t dtype_size(DType dtype);

/// Short lowercase name ("bf16", "e4m3", "e2m1x2", ...).
const char* dtype_name(DType dtype);

}  // namespace cakemoe
