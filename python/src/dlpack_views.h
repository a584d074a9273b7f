// DLPack arrays (torch, numpy, anything with __dlpack__) <-> cakemoe::TensorView, for the nanobind
// module. Views borrow the caller's memory: the Python layer keeps the arrays alive as long as a
// plan that holds their pointers.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <string>

#include "cakemoe/tensor.h"

namespace cakemoe {
namespace python {

/// Any dtype, any device, read-only is fine (the library decides what it writes).
using AnyArray = nanobind::ndarray<nanobind::ro>;

/// A view of `array` (shape, element strides, dtype, device). Throws InvalidArgument naming
/// `argument` for a dtype the library has no name for (e.g. float64). uint16 arrays are read as
/// bf16 bit patterns (numpy has no bfloat16); uint8 arrays stand for every 8-bit format.
TensorView to_view(const AnyArray& array, const std::string& argument);

/// An object with __dlpack__ over `view`'s memory that keeps `owner` alive (e.g. the plan that
/// owns a workspace); torch.from_dlpack / numpy.from_dlpack take it. The 8-bit formats travel as
/// uint8; bf16 as bfloat16, or as uint16 with `bf16_as_uint16` (for numpy, which has no bf16).
nanobind::ndarray<nanobind::array_api> from_view(const TensorView& view, nanobind::handle owner,
                                                 bool bf16_as_uint16 = false);

}  // namespace python
}  // namespace cakemoe
