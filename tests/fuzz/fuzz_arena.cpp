#include "fuzz_arena.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

namespace cakemoe {
namespace fuzz {
namespace {

// Flag byte of one view: bits 0-1 the mode, then one bit per optional rewrite.
constexpr uint8_t kModeMask = 0x3;
constexpr uint8_t kModeTogglePresence = 1;
constexpr uint8_t kModeRawNdim = 2;  // ndim := any int8 (keeps the shape array)
constexpr uint8_t kModeReshape = 3;  // ndim in [0, 6] and fresh dims
constexpr uint8_t kNullData = 1 << 2;
constexpr uint8_t kDtype = 1 << 3;
constexpr uint8_t kOneDim = 1 << 4;
constexpr uint8_t kOneStride = 1 << 5;
constexpr uint8_t kDevice = 1 << 6;
constexpr uint8_t kFillOverride = 1 << 7;
constexpr int64_t kFillPeriod = 4096;  // elements drawn per buffer, then repeated

int64_t element_size(DType dtype) {
  const size_t s = dtype_size(dtype);
  return s == 0 ? 1 : static_cast<int64_t>(s);
}

// Strides computed with wrapping arithmetic (callers may write anything into a public view).
void set_contiguous_strides(TensorView& v) {
  int64_t stride = 1;
  for (int d = TensorView::kMaxDims - 1; d >= 0; --d) {
    if (d >= v.ndim) {
      v.strides[d] = 0;
      continue;
    }
    v.strides[d] = stride;
    stride = wrap_mul(stride, v.shape[d]);
  }
}

uint16_t bf16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  return static_cast<uint16_t>(x >> 16);
}

uint16_t fp16_bits(float f) {  // truncating conversion; tiny values flush to zero
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const int exponent = static_cast<int>((x >> 23) & 0xFF);
  const uint32_t mantissa = x & 0x7FFFFF;
  if (exponent == 0xFF) return sign | 0x7C00 | (mantissa ? 0x200 : 0);
  const int e = exponent - 127 + 15;
  if (e >= 31) return sign | 0x7C00;
  if (e <= 0) return sign;
  return static_cast<uint16_t>(sign | (e << 10) | (mantissa >> 13));
}

}  // namespace

int64_t claimed_bytes(const TensorView& v) {
  if (v.ndim < 0 || v.ndim > TensorView::kMaxDims) return -1;
  for (int d = 0; d < v.ndim; ++d) {
    if (v.shape[d] == 0) return 0;
  }
  int64_t last = 0;  // offset of the last element
  for (int d = 0; d < v.ndim; ++d) {
    int64_t span = 0;
    if (v.shape[d] < 0 || v.strides[d] < 0) return -1;
    if (__builtin_mul_overflow(v.shape[d] - 1, v.strides[d], &span)) return -1;
    if (__builtin_add_overflow(last, span, &last)) return -1;
  }
  int64_t bytes = 0;
  if (__builtin_add_overflow(last, 1, &last)) return -1;
  if (__builtin_mul_overflow(last, element_size(v.dtype), &bytes)) return -1;
  return bytes;
}

void Arena::FreeDeleter::operator()(void* p) const { std::free(p); }

uint64_t Arena::next_random() {  // splitmix64
  uint64_t z = (rng_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void* Arena::allocate(int64_t bytes) {
  void* p = nullptr;
  // NOTE: the exact size (no rounding), so ASan flags the first byte past the claim.
  if (posix_memalign(&p, 64, static_cast<size_t>(bytes)) != 0 || p == nullptr) {
    if (posix_memalign(&p, 64, 1) != 0) return nullptr;
  }
  buffers_.emplace_back(p);
  used_ += bytes;
  return p;
}

void Arena::fill_buffer(void* data, int64_t bytes, DType dtype, const FillSpec& fill) {
  auto* out = static_cast<uint8_t*>(data);
  if (fill.kind == Fill::kZero) {
    std::memset(out, 0, static_cast<size_t>(bytes));
    return;
  }
  const int64_t size = element_size(dtype);
  // NOTE: only the first kFillPeriod elements are drawn; the rest repeat them, which keeps a
  // 64 MiB fill cheap (the fuzzer's time goes to the library, not to its random generator).
  const int64_t n = std::min(bytes / size, kFillPeriod);
  const uint64_t range =
      fill.hi > fill.lo ? static_cast<uint64_t>(fill.hi) - static_cast<uint64_t>(fill.lo) : 1;
  for (int64_t i = 0; i < n; ++i) {
    uint8_t* e = out + i * size;
    if (fill.kind == Fill::kBytes || (fill.kind == Fill::kFloat && size == 1)) {
      const uint64_t r = next_random();
      std::memcpy(e, &r, static_cast<size_t>(size));
      continue;
    }
    int64_t ivalue = fill.lo;
    if (fill.kind == Fill::kIndex) {
      ivalue = static_cast<int64_t>(static_cast<uint64_t>(fill.lo) + next_random() % range);
    } else if (fill.kind == Fill::kStep) {
      const int64_t step = wrap_mul(i + 1, fill.lo);
      ivalue = step < fill.hi ? step : fill.hi;
    }
    float fvalue = static_cast<float>(ivalue);
    if (fill.kind == Fill::kFloat) {
      // Sum of uniforms: a cheap bell shape in [-2, 2).
      const double u = static_cast<double>(next_random() >> 11) * 0x1.0p-52 +
                       static_cast<double>(next_random() >> 11) * 0x1.0p-52;
      fvalue = static_cast<float>(u - 2.0) * fill.scale;  // float overflow is Inf, not UB
    }
    switch (dtype) {
      case DType::kFP32:
        std::memcpy(e, &fvalue, 4);
        break;
      case DType::kBF16: {
        const uint16_t b = bf16_bits(fvalue);
        std::memcpy(e, &b, 2);
      } break;
      case DType::kFP16: {
        const uint16_t b = fp16_bits(fvalue);
        std::memcpy(e, &b, 2);
      } break;
      case DType::kInt32: {
        const int32_t v = static_cast<int32_t>(ivalue);
        std::memcpy(e, &v, 4);
      } break;
      case DType::kInt64:
        std::memcpy(e, &ivalue, 8);
        break;
      default:
        *e = static_cast<uint8_t>(ivalue);
        break;
    }
  }
  const int64_t period = n * size;
  for (int64_t at = period; period > 0 && at < bytes; at += period) {
    std::memcpy(out + at, out, static_cast<size_t>(std::min(period, bytes - at)));
  }
}

TensorView Arena::view(DType dtype, const std::vector<int64_t>& shape, FillSpec fill,
                       bool present) {
  TensorView natural;
  natural.dtype = dtype;
  natural.ndim =
      static_cast<int>(shape.size() < TensorView::kMaxDims ? shape.size() : TensorView::kMaxDims);
  for (int d = 0; d < natural.ndim; ++d) natural.shape[d] = shape[d];
  set_contiguous_strides(natural);

  const uint8_t flags = in_.byte();
  const uint8_t mode = flags & kModeMask;
  if (mode == kModeTogglePresence) present = !present;
  if (!present) return TensorView();
  TensorView v = natural;
  if (mode == kModeRawNdim) {
    v.ndim = static_cast<int8_t>(in_.byte());
  } else if (mode == kModeReshape) {
    v.ndim = in_.byte() % (TensorView::kMaxDims + 1);
    for (int d = 0; d < v.ndim; ++d) v.shape[d] = in_.dim();
    set_contiguous_strides(v);
  }
  if (flags & kDtype) v.dtype = in_.any_enum<DType>();
  if (flags & kOneDim) {
    const int d = in_.byte() % TensorView::kMaxDims;
    v.shape[d] = in_.dim();
  }
  if (flags & kOneStride) {
    const int d = in_.byte() % TensorView::kMaxDims;
    v.strides[d] = in_.dim();
  }
  if (flags & kDevice) {
    v.device.type = in_.any_enum<DeviceType>();
    v.device.index = static_cast<int8_t>(in_.byte());
  }
  if (flags & kFillOverride) {
    switch (in_.byte() % 6) {
      case 0:
        fill = {Fill::kZero, 0, 1, 1.0f};
        break;
      case 1:
        fill = const_fill(-1);
        break;
      case 2:
        fill = byte_fill();
        break;
      case 3:
        fill = index_fill(-2, in_.dim());
        break;
      case 4:
        fill = const_fill(in_.dim());
        break;
      default:
        fill = float_fill(in_.scalar_f());
        break;
    }
  }
  if (!(flags & kNullData)) back_with_buffer(v, natural, fill);
  note_if_invalid(v);
  return v;
}

void Arena::back_with_buffer(TensorView& v, const TensorView& natural, const FillSpec& fill) {
  int64_t bytes = claimed_bytes(v);
  if (bytes >= 0 && bytes > kRealBytesCap - used_) return;  // a claim too big to back: null
  if (bytes < 0) {
    // No buffer can back this claim: the natural buffer (or a small one), never to be read.
    bytes = claimed_bytes(natural);
    if (bytes < 0 || bytes > kRealBytesCap - used_) bytes = 64;
  }
  v.data = allocate(bytes);
  if (v.data != nullptr) fill_buffer(v.data, bytes, v.dtype, fill);
}

void Arena::note_if_invalid(const TensorView& v) {
  ++view_count_;
  std::string why;
  if (v.ndim < 0 || v.ndim > TensorView::kMaxDims) {
    why = "ndim " + std::to_string(v.ndim);
  } else if (static_cast<uint8_t>(v.dtype) > static_cast<uint8_t>(DType::kInt64)) {
    why = "dtype " + std::to_string(static_cast<int>(v.dtype));
  } else if (static_cast<uint8_t>(v.device.type) > static_cast<uint8_t>(DeviceType::kCUDA)) {
    why = "device type " + std::to_string(static_cast<int>(v.device.type));
  } else {
    bool empty = false;
    for (int d = 0; d < v.ndim; ++d) {
      if (v.shape[d] < 0) why = "dim " + std::to_string(d) + " = " + std::to_string(v.shape[d]);
      if (v.shape[d] == 0) empty = true;
    }
    if (why.empty() && v.ndim > 0 && !empty && v.data == nullptr) why = "null data";
  }
  if (!why.empty() && invalid_.empty()) {
    invalid_ = "argument #" + std::to_string(view_count_) + " (" + why + ")";
  }
}

std::vector<TensorView> Arena::views(int count, DType dtype, const std::vector<int64_t>& shape,
                                     FillSpec fill) {
  std::vector<TensorView> out;
  for (int i = 0; i < count; ++i) out.push_back(view(dtype, shape, fill));
  return out;
}

}  // namespace fuzz
}  // namespace cakemoe
