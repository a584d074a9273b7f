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
#include "kwargs.h"
#include "stepfun_binding.h"
#include "stepfun_ep_binding.h"
#include "views.h"

namespace nb = nanobind;

namespace cakemoe {
namespace python {
namespace {

// Python exception types: InvalidArgument and Unsupported are ValueErrors (what FlashInfer's
// prepare_bgmv_moe raises, spec bgmv §10), ArgumentTypeError an InvalidArgument and a TypeError
// (a value of the wrong Python type), CudaError a RuntimeError; all share cakemoe.Error.
struct ErrorTypes {
  PyObject* error = nullptr;
  PyObject* invalid_argument = nullptr;
  PyObject* argument_type = nullptr;
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
  g_errors.argument_type =
      new_error_type(m, "ArgumentTypeError", g_errors.invalid_argument, PyExc_TypeError);
  g_errors.unsupported = new_error_type(m, "Unsupported", g_errors.error, PyExc_ValueError);
  g_errors.cuda_error = new_error_type(m, "CudaError", g_errors.error, PyExc_RuntimeError);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ArgumentTypeError& e) {
      raise_typed(g_errors.argument_type, e);
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

bgmv::BgmvPlan prepare(nb::dict kwargs) {
  Kwargs kw(kwargs, "prepare_bgmv_moe");
  const TensorView x = kw.tensor("x");
  const std::vector<TensorView> lora_a = kw.tensor_list("lora_a_weights");
  const std::vector<TensorView> lora_b = kw.tensor_list("lora_b_weights");
  const TensorView sorted_token_ids = kw.tensor("sorted_token_ids");
  const TensorView expert_ids = kw.tensor("expert_ids");
  const TensorView lora_indices = kw.tensor("lora_indices");
  const TensorView topk_weights = kw.tensor("topk_weights");
  const int64_t num_experts = kw.integer("num_experts", std::nullopt);
  bgmv::BgmvOptions options;
  options.backend = kw.text("backend", options.backend);
  options.fallback = kw.flag("fallback", options.fallback);
  options.shrink_out = kw.tensor("shrink_out", Access::kWrite);
  options.y_accum = kw.tensor("y_accum", Access::kWrite);
  options.grouped = kw.optional_flag("grouped");
  options.order_remap = kw.optional_flag("order_remap");
  kw.finish();
  return bgmv::prepare_bgmv_moe(x, lora_a, lora_b, sorted_token_ids, expert_ids, lora_indices,
                                topk_weights, num_experts, options);
}

// Fallback warnings go to cakemoe._on_fallback_warning (warnings.warn(RuntimeWarning) unless the
// caller installed a hook); looked up per call so no Python object outlives the interpreter here.
void install_warning_hook() {
  bgmv::set_warning_hook([](const std::string& message) {
    nb::gil_scoped_acquire gil;
    nb::module_::import_("cakemoe").attr("_on_fallback_warning")(message);
  });
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
  m.attr("__version__") = CAKEMOE_VERSION;
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
      .def_prop_ro("route_index",
                   [](nb::handle self) {
                     return view_ref(nb::cast<bgmv::BgmvPlan&>(self).route_index(), self);
                   })
      .def_prop_ro(
          "y_accum",
          [](nb::handle self) { return view_ref(nb::cast<bgmv::BgmvPlan&>(self).y_accum(), self); })
      .def_prop_ro("shrink_out", [](nb::handle self) {
        return view_ref(nb::cast<bgmv::BgmvPlan&>(self).shrink_out(), self);
      });

  m.def("prepare_bgmv_moe", &prepare, nb::arg("kwargs"));
  register_views(m);
  register_stepfun(m);
  register_config(m);
  register_stepfun_ep(m);
}
