// The `cakemoe._cakemoe` extension: a thin nanobind layer over the public C++ API. Arrays arrive
// through DLPack (torch, numpy, ...), so nothing here depends on torch. The Python package
// (python/cakemoe/__init__.py) adds the spec's keyword names, stream lookup and binding checks.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cakemoe/bgmv.h"
#include "cakemoe/errors.h"
#include "dlpack_views.h"

namespace nb = nanobind;

namespace cakemoe {
namespace python {
namespace {

// Python exception types: InvalidArgument and Unsupported are ValueErrors (what FlashInfer's
// prepare_bgmv_moe raises, spec bgmv §10), CudaError a RuntimeError; all share cakemoe.Error.
struct ErrorTypes {
  PyObject* error = nullptr;
  PyObject* invalid_argument = nullptr;
  PyObject* unsupported = nullptr;
  PyObject* cuda_error = nullptr;
};
ErrorTypes g_errors;

PyObject* new_error_type(nb::module_& m, const char* name, PyObject* base, PyObject* second) {
  PyObject* bases = second != nullptr ? PyTuple_Pack(2, base, second) : PyTuple_Pack(1, base);
  const std::string qualified = std::string("cakemoe.") + name;
  PyObject* type = PyErr_NewException(qualified.c_str(), bases, nullptr);
  Py_DECREF(bases);
  if (type == nullptr) throw nb::python_error();
  m.attr(name) = nb::handle(type);  // the module keeps a reference; `type` keeps ours for good
  return type;
}

void raise_typed(PyObject* type, const Error& e) {
  PyObject* instance = PyObject_CallFunction(type, "s", e.what());
  if (instance == nullptr) return;  // the failed call left its own error set
  nb::handle h(instance);
  h.attr("argument") = e.argument();
  h.attr("rule") = e.rule();
  PyErr_SetObject(type, instance);
  Py_DECREF(instance);
}

void register_errors(nb::module_& m) {
  g_errors.error = new_error_type(m, "Error", PyExc_Exception, nullptr);
  g_errors.invalid_argument =
      new_error_type(m, "InvalidArgument", g_errors.error, PyExc_ValueError);
  g_errors.unsupported = new_error_type(m, "Unsupported", g_errors.error, PyExc_ValueError);
  g_errors.cuda_error = new_error_type(m, "CudaError", g_errors.error, PyExc_RuntimeError);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const InvalidArgument& e) {
      raise_typed(g_errors.invalid_argument, e);
    } catch (const Unsupported& e) {
      raise_typed(g_errors.unsupported, e);
    } catch (const CudaError& e) {
      raise_typed(g_errors.cuda_error, e);
    } catch (const Error& e) {
      raise_typed(g_errors.error, e);
    }
  });
}

std::optional<TensorView> optional_view(const std::optional<AnyArray>& array,
                                        const std::string& argument) {
  if (!array) return std::nullopt;
  return to_view(*array, argument);
}

std::vector<TensorView> list_views(const std::vector<AnyArray>& arrays, const std::string& name) {
  std::vector<TensorView> views;
  views.reserve(arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    views.push_back(to_view(arrays[i], name + "[" + std::to_string(i) + "]"));
  }
  return views;
}

bgmv::BgmvPlan prepare(const AnyArray& x, const std::vector<AnyArray>& lora_a,
                       const std::vector<AnyArray>& lora_b, const AnyArray& sorted_token_ids,
                       const AnyArray& expert_ids, const AnyArray& lora_indices,
                       const AnyArray& topk_weights, int64_t num_experts,
                       const std::string& backend, bool fallback,
                       const std::optional<AnyArray>& shrink_out,
                       const std::optional<AnyArray>& y_accum, std::optional<bool> grouped,
                       std::optional<bool> order_remap) {
  bgmv::BgmvOptions options;
  options.backend = backend;
  options.fallback = fallback;
  options.shrink_out = optional_view(shrink_out, "shrink_out").value_or(TensorView());
  options.y_accum = optional_view(y_accum, "y_accum").value_or(TensorView());
  options.grouped = grouped;
  options.order_remap = order_remap;
  return bgmv::prepare_bgmv_moe(
      to_view(x, "x"), list_views(lora_a, "lora_a_weights"), list_views(lora_b, "lora_b_weights"),
      to_view(sorted_token_ids, "sorted_token_ids"), to_view(expert_ids, "expert_ids"),
      to_view(lora_indices, "lora_indices"), to_view(topk_weights, "topk_weights"), num_experts,
      options);
}

// Fallback warnings go to cakemoe._on_fallback_warning (warnings.warn(RuntimeWarning) unless the
// caller installed a hook); looked up per call so no Python object outlives the interpreter here.
void install_warning_hook() {
  bgmv::set_warning_hook([](const std::string& message) {
    nb::gil_scoped_acquire gil;
    nb::module_::import_("cakemoe").attr("_on_fallback_warning")(message);
  });
}

nb::object optional_array(const TensorView& view, nb::handle owner) {
  if (!view.defined()) return nb::none();
  return nb::cast(from_view(view, owner));
}

}  // namespace
}  // namespace python
}  // namespace cakemoe

NB_MODULE(_cakemoe, m) {
  using namespace cakemoe;
  using namespace cakemoe::python;
  m.doc() = "cakemoe C++ core (use the `cakemoe` package, not this module directly)";
#if defined(CAKEMOE_WITH_CUDA)
  m.attr("with_cuda") = true;
#else
  m.attr("with_cuda") = false;
#endif
  register_errors(m);
  install_warning_hook();

  nb::class_<bgmv::BgmvPlan>(m, "BgmvPlanCore")
      .def(
          "run",
          [](bgmv::BgmvPlan& plan, uintptr_t stream) {
            plan.run(reinterpret_cast<Stream>(stream));
          },
          nb::arg("stream"), nb::call_guard<nb::gil_scoped_release>(),
          "Enqueues one replay on `stream` (a cudaStream_t as an integer; 0 = legacy default).")
      .def("close", &bgmv::BgmvPlan::close, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("backend_used", &bgmv::BgmvPlan::backend_used)
      .def_prop_ro("variant", &bgmv::BgmvPlan::variant)
      .def_prop_ro("shrink_launch",
                   [](const bgmv::BgmvPlan& plan) -> std::optional<std::pair<int, int>> {
                     const auto launch = plan.shrink_launch();
                     if (!launch) return std::nullopt;
                     // spec §1: (form, splits), the form in the spec's numbering
                     return std::make_pair(bgmv::shrink_form_number(launch->kind), launch->splits);
                   })
      .def_prop_ro("grouped", &bgmv::BgmvPlan::grouped)
      .def_prop_ro("grouped_mma", &bgmv::BgmvPlan::grouped_mma)
      .def_prop_ro("order_remap", &bgmv::BgmvPlan::order_remap)
      .def_prop_ro("pdl_mode", &bgmv::BgmvPlan::pdl_mode)
      .def_prop_ro("schedule_id", &bgmv::BgmvPlan::schedule_id)
      .def_prop_ro("fallback_reason", &bgmv::BgmvPlan::fallback_reason)
      .def_prop_ro("route_index", [](nb::handle self) {
        return optional_array(nb::cast<bgmv::BgmvPlan&>(self).route_index(), self);
      });

  m.def("prepare_bgmv_moe", &prepare, nb::arg("x"), nb::arg("lora_a_weights"),
        nb::arg("lora_b_weights"), nb::arg("sorted_token_ids"), nb::arg("expert_ids"),
        nb::arg("lora_indices"), nb::arg("topk_weights"), nb::arg("num_experts"),
        nb::arg("backend"), nb::arg("fallback"), nb::arg("shrink_out").none(),
        nb::arg("y_accum").none(), nb::arg("grouped").none(), nb::arg("order_remap").none());
}
