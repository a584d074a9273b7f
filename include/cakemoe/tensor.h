// cakemoe public API: non-owning tensor views, owning tensors, allocators, streams.
// No CUDA types leak through this header: streams are opaque pointers.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "cakemoe/dtype.h"

namespace cakemoe {

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  static Device cpu() { return Device{DeviceType::kCPU, 0}; }
  static Device cuda(int index = 0) { return Device{DeviceType::kCUDA, index}; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

/// Opaque stream handle (a `cudaStream_t` on CUDA devices, ignored on the CPU backend).
using Stream = void*;

/// A non-owning view: pointer, shape, strides (in elements), dtype, device.
/// A default-constructed view is "absent" (`defined() == false`): optional arguments use it.
/// For kE2M1x2 the shape counts bytes (two values each), as torch's uint8 views do.
///
/// Bounds and validation: the fields are public, so every entry point checks each view it is
/// given before using it and throws InvalidArgument naming the argument when the view has more
/// than kMaxDims dimensions, a dtype or device outside the enums, a negative size or stride, a
/// numel, byte size or addressed span that overflows int64, or a null `data` with elements
/// (a view with zero elements may have null data). numel() and nbytes() throw
/// InvalidArgument("shape") on such views instead of wrapping.
struct TensorView {
  static constexpr int kMaxDims = 6;

  void* data = nullptr;
  DType dtype = DType::kUInt8;
  Device device;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  TensorView() = default;
  /// Contiguous row-major view.
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape,
             Device device = Device::cpu());
  TensorView(void* data, DType dtype, const std::vector<int64_t>& shape,
             Device device = Device::cpu());
  /// View with explicit strides (elements).
  TensorView(void* data, DType dtype, const std::vector<int64_t>& shape,
             const std::vector<int64_t>& strides, Device device = Device::cpu());

  /// False only for an absent view, exactly as TensorView() makes it (ndim 0, null data, default
  /// dtype and device). Any other view is given and validated as such: a negative ndim or an
  /// out-of-range dtype with null data is an error, not an absence.
  bool defined() const {
    return ndim != 0 || data != nullptr || dtype != DType::kUInt8 ||
           device.type != DeviceType::kCPU || device.index != 0;
  }
  int64_t size(int dim) const;  ///< negative dims count from the end
  int64_t stride(int dim) const;
  int64_t numel() const;
  size_t nbytes() const;
  bool is_contiguous() const;
  std::vector<int64_t> sizes() const { return std::vector<int64_t>(shape, shape + ndim); }
  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }
  /// "[4, 8] bf16 cpu" style description for error messages.
  std::string describe() const;
};

/// Allocates raw bytes on one device. The library never allocates except through one of these.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;
};

/// 64-byte aligned host memory.
Allocator* host_allocator();
/// cudaMalloc/cudaFree on the given device; throws Unsupported in a build without CUDA.
Allocator* cuda_allocator(int device_index = 0);
/// The default allocator for a device.
Allocator* default_allocator(Device device);

/// An owning tensor: storage shared by copies, contiguous row-major.
class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const std::vector<int64_t>& shape, DType dtype, Device device = Device::cpu(),
                      Allocator* allocator = nullptr);
  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }  // NOLINT: views are the currency
  bool defined() const { return view_.defined(); }
  void* data() const { return view_.data; }
  template <typename T>
  T* ptr() const { return view_.ptr<T>(); }
  DType dtype() const { return view_.dtype; }
  Device device() const { return view_.device; }
  int64_t numel() const { return view_.numel(); }
  size_t nbytes() const { return view_.nbytes(); }
  int64_t size(int dim) const { return view_.size(dim); }
  int dim() const { return view_.ndim; }

 private:
  TensorView view_;
  std::shared_ptr<void> storage_;
};

}  // namespace cakemoe
