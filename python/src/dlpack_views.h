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
/// `argument` for a dtype the library has no name for (e.g. float64, uint16).
TensorView to_view(const AnyArray& array, const std::string& argument);

/// An object with __dlpack__ over `view`'s memory that keeps `owner` alive (e.g. the plan that
/// owns a workspace); torch.from_dlpack / numpy.from_dlpack take it.
nanobind::ndarray<nanobind::array_api> from_view(const TensorView& view, nanobind::handle owner);

}  // namespace python
}  // namespace cakemoe
