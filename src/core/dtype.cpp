#include "cakemoe/dtype.h"

namespace cakemoe {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
    case DType::kFP16:
      return 2;
    case DType::kFP32:
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kE4M3:
    case DType::kUE8M0:
    case DType::kE2M1x2:
    case DType::kUInt8:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return "bf16";
    case DType::kFP16: return "fp16";
    case DType::kFP32: return "fp32";
    case DType::kE4M3: return "e4m3";
    case DType::kUE8M0: return "ue8m0";
    case DType::kE2M1x2: return "e2m1x2";
    case DType::kUInt8: return "uint8";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
  }
  return "?";
}

}  // namespace cakemoe
