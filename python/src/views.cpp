#include "views.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "dlpack_views.h"

namespace nb = nanobind;

namespace cakemoe {
namespace python {

nb::object view_ref(const TensorView& view, nb::handle owner) {
  if (!view.defined()) return nb::none();
  ViewRef ref;
  ref.view = view;
  ref.owner = nb::borrow(owner);
  return nb::cast(std::move(ref));
}

nb::object tensor_ref(const Tensor& tensor) {
  if (!tensor.defined()) return nb::none();
  ViewRef ref;
  ref.view = tensor.view();
  ref.storage = tensor;
  return nb::cast(std::move(ref));
}

void register_views(nb::module_& m) {
  nb::class_<ViewRef>(m, "ViewRef", "A C++ result; cakemoe converts it for the caller's framework")
      .def(
          "dlpack",
          [](nb::handle self, bool bf16_as_uint16) {
            return from_view(nb::cast<ViewRef&>(self).view, self, bf16_as_uint16);
          },
          nb::arg("bf16_as_uint16"))
      .def_prop_ro("dtype", [](const ViewRef& r) { return std::string(dtype_name(r.view.dtype)); })
      .def_prop_ro("shape", [](const ViewRef& r) { return r.view.sizes(); })
      .def_prop_ro("data_ptr",
                   [](const ViewRef& r) { return reinterpret_cast<uintptr_t>(r.view.data); });
}

}  // namespace python
}  // namespace cakemoe
