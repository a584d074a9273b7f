// Results handed to Python: a view plus whatever keeps its memory alive (an owning Tensor or the
// Python object of a launch). The Python layer turns each into a torch tensor or numpy array.
#pragma once

#include <nanobind/nanobind.h>

#include <vector>

#include "cakemoe/tensor.h"

namespace cakemoe {
namespace python {

struct ViewRef {
  TensorView view;
  Tensor storage;          // set when the result owns its memory
  nanobind::object owner;  // set when another Python object owns it
};

/// A ViewRef for `view` kept alive by `owner`, or None for an undefined view.
nanobind::object view_ref(const TensorView& view, nanobind::handle owner);
/// A ViewRef owning `tensor`, or None for an undefined tensor.
nanobind::object tensor_ref(const Tensor& tensor);

void register_views(nanobind::module_& m);

}  // namespace python
}  // namespace cakemoe
