// The StepFun entries of `cakemoe._cakemoe`: keyword arguments (FlashInfer's names, spec stepfun
// §9) into the C++ argument structs, prepared launches, plans, weight and activation preparation.
// The Python layer (python/cakemoe/stepfun.py) adds framework conversion and streams.
#include "stepfun_binding.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "cakemoe/stepfun.h"
#include "kwargs.h"
#include "stepfun_args.h"
#include "views.h"

namespace nb = nanobind;

namespace cakemoe {
namespace python {
namespace {

using stepfun::Family;
using stepfun::Plan;

Stream to_stream(uintptr_t handle) { return reinterpret_cast<Stream>(handle); }

}  // namespace

nb::list moe_outputs(const stepfun::StepFunMoeLaunch& launch, nb::handle owner) {
  nb::list out;
  for (const TensorView& v : launch.outputs()) out.append(view_ref(v, owner));
  return out;
}

nb::list owned_outputs(const std::vector<Tensor>& tensors) {
  nb::list out;
  for (const Tensor& t : tensors) out.append(tensor_ref(t));
  return out;
}

nb::dict weights_dict(const stepfun::StepFunWeights& w) {
  nb::dict d;
  d["family"] = stepfun::family_name(w.family);
  d["gemm1_weights"] = tensor_ref(w.gemm1_weights);
  d["gemm1_weights_scale"] = tensor_ref(w.gemm1_weights_scale);
  d["gemm2_weights"] = tensor_ref(w.gemm2_weights);
  d["gemm2_weights_scale"] = tensor_ref(w.gemm2_weights_scale);
  d["output1_scale_scalar"] = tensor_ref(w.output1_scale_scalar);
  d["output1_scale_gate_scalar"] = tensor_ref(w.output1_scale_gate_scalar);
  d["output2_scale_scalar"] = tensor_ref(w.output2_scale_scalar);
  d["gemm1_clamp_limit"] = tensor_ref(w.gemm1_clamp_limit);
  d["hidden_states_scale_global"] = w.hidden_states_scale_global;
  d["intermediate_scale_global"] = w.intermediate_scale_global;
  return d;
}

nb::dict activations_dict(const stepfun::StepFunActivations& a) {
  nb::dict d;
  d["hidden_states"] = tensor_ref(a.hidden_states);
  d["hidden_states_scale"] = tensor_ref(a.hidden_states_scale);
  d["per_token_scale"] = tensor_ref(a.per_token_scale);
  return d;
}

namespace {

stepfun::ProblemDesc problem_desc(Kwargs& kw) {
  stepfun::ProblemDesc p;
  p.family = kw.family("family");
  p.num_tokens = kw.integer("num_tokens", std::nullopt);
  p.top_k = kw.integer("top_k", std::nullopt);
  p.local_num_experts = kw.integer("local_num_experts", std::nullopt);
  p.hidden_size = kw.integer("hidden_size", std::nullopt);
  p.intermediate_size = kw.integer("intermediate_size", std::nullopt);
  p.logits_input = kw.flag("logits_input", true);
  const std::string device = kw.text("device", "cpu");
  if (device == "cuda") {
    p.device = Device::cuda(static_cast<int>(kw.integer("device_index", 0)));
  } else if (device == "cpu") {
    kw.integer("device_index", 0);
  } else {
    throw InvalidArgument("device", "must be cpu or cuda, got '" + device + "'");
  }
  kw.finish();
  return p;
}

template <typename Args, typename Fill, typename Prepare>
void def_stage(nb::module_& m, const char* name, Fill fill, Prepare prepare) {
  m.def(name, [name, fill, prepare](nb::dict kwargs) {
    Kwargs kw(kwargs, std::string(name).substr(std::string("prepare_").size()));
    const Args args = fill(kw);
    nb::gil_scoped_release release;
    return prepare(args);
  });
}

void register_plan(nb::module_& m) {
  nb::class_<Plan>(m, "Plan",
                   "A StepFun launch plan (spec stepfun §8): the tile and the catalog units.")
      .def(
          "__init__",
          [](Plan* p, const std::string& family, int tile, const std::string& fc1_kernel,
             const std::string& fc2_kernel, const std::string& act_sf_layout,
             const std::string& routing_variant, const std::string& finalize_variant) {
            new (p) Plan();
            p->family = stepfun::parse_family(family);
            p->tile = tile;
            p->fc1_kernel = fc1_kernel;
            p->fc2_kernel = fc2_kernel;
            p->act_sf_layout = parse_sf_layout(act_sf_layout, "act_sf_layout");
            p->routing_variant = routing_variant;
            p->finalize_variant = finalize_variant;
          },
          nb::kw_only(), nb::arg("family"), nb::arg("tile"), nb::arg("fc1_kernel"),
          nb::arg("fc2_kernel"), nb::arg("act_sf_layout"), nb::arg("routing_variant"),
          nb::arg("finalize_variant"))
      .def_prop_ro("family", [](const Plan& p) { return stepfun::family_name(p.family); })
      .def_ro("tile", &Plan::tile, "tile_tokens_dim: tokens per CTA tile and routing padding")
      .def_ro("fc1_kernel", &Plan::fc1_kernel)
      .def_ro("fc2_kernel", &Plan::fc2_kernel)
      .def_prop_ro("act_sf_layout",
                   [](const Plan& p) { return stepfun::sf_layout_name(p.act_sf_layout); })
      .def_ro("routing_variant", &Plan::routing_variant)
      .def_ro("finalize_variant", &Plan::finalize_variant)
      .def(
          "__eq__",
          [](const Plan& a, nb::object other) -> nb::object {
            Plan b;
            if (!nb::try_cast(other, b, false)) return nb::borrow(Py_NotImplemented);
            return nb::bool_(
                a.family == b.family && a.tile == b.tile && a.fc1_kernel == b.fc1_kernel &&
                a.fc2_kernel == b.fc2_kernel && a.act_sf_layout == b.act_sf_layout &&
                a.routing_variant == b.routing_variant && a.finalize_variant == b.finalize_variant);
          },
          nb::sig("def __eq__(self, other: object, /) -> bool"))
      .def("__repr__", [](const Plan& p) {
        std::ostringstream os;
        os << p;
        return os.str();
      });
}

}  // namespace

void register_stepfun(nb::module_& m) {
  register_plan(m);
  nb::class_<stepfun::StepFunStageLaunch>(m, "StepFunStageLaunch")
      .def(
          "launch",
          [](const stepfun::StepFunStageLaunch& l, uintptr_t stream) {
            l.launch(to_stream(stream));
          },
          nb::arg("stream"), nb::call_guard<nb::gil_scoped_release>());
  nb::class_<stepfun::StepFunMoeLaunch>(m, "StepFunMoeLaunch")
      .def(
          "launch",
          [](const stepfun::StepFunMoeLaunch& l, uintptr_t stream) { l.launch(to_stream(stream)); },
          nb::arg("stream"), nb::call_guard<nb::gil_scoped_release>())
      .def("outputs",
           [](nb::handle self) {
             return moe_outputs(nb::cast<const stepfun::StepFunMoeLaunch&>(self), self);
           })
      .def_prop_ro("plan", &stepfun::StepFunMoeLaunch::plan);

  def_stage<stepfun::RoutingArgs>(m, "prepare_routing", routing_args, stepfun::prepare_routing);
  def_stage<stepfun::Fc1Args>(m, "prepare_fc1", fc1_args, stepfun::prepare_fc1);
  def_stage<stepfun::RequantArgs>(m, "prepare_requant", requant_args, stepfun::prepare_requant);
  def_stage<stepfun::Fc2Args>(m, "prepare_fc2", fc2_args, stepfun::prepare_fc2);
  def_stage<stepfun::FinalizeArgs>(m, "prepare_finalize", finalize_args, stepfun::prepare_finalize);

  // `stream`: where autotune measures (the caller's stream); launches take theirs later.
  m.def(
      "prepare_stepfun_moe",
      [](nb::dict kwargs, uintptr_t stream) {
        Kwargs kw(kwargs, "prepare_stepfun_moe");
        stepfun::MoeArgs args = moe_args(kw);
        args.autotune_stream = to_stream(stream);
        nb::gil_scoped_release release;
        return stepfun::prepare_stepfun_moe(args);
      },
      nb::arg("kwargs"), nb::arg("stream") = 0);
  m.def("autotune_cache_size", &stepfun::autotune_cache_size);
  m.def("clear_autotune_cache", &stepfun::clear_autotune_cache);
  m.def("stepfun_moe", [](nb::dict kwargs, uintptr_t stream) {
    Kwargs kw(kwargs, "stepfun_moe");
    const stepfun::MoeArgs args = moe_args(kw);
    std::vector<Tensor> outputs;
    {
      nb::gil_scoped_release release;
      outputs = stepfun::stepfun_moe(args, to_stream(stream));
    }
    return owned_outputs(outputs);
  });

  m.def("prepare_weights", [](nb::dict kwargs) {
    Kwargs kw(kwargs, "prepare_weights");
    const TensorView w1 = kw.tensor("w1"), w2 = kw.tensor("w2");
    stepfun::WeightPrepOptions o;
    o.family = kw.family("family");
    o.step_limits = kw.reals("step_limits");
    o.local_expert_offset = kw.integer("local_expert_offset", 0);
    o.local_num_experts = kw.integer("local_num_experts", -1);
    o.hidden_states_scale_global = kw.real("hidden_states_scale_global", 0.0);
    o.intermediate_scale_global = kw.real("intermediate_scale_global", 0.0);
    kw.finish();
    stepfun::StepFunWeights w;
    {
      nb::gil_scoped_release release;
      w = stepfun::prepare_weights(w1, w2, o);
    }
    return weights_dict(w);
  });
  m.def("prepare_activations", [](nb::dict kwargs) {
    Kwargs kw(kwargs, "prepare_activations");
    const Family family = kw.family("family");
    const TensorView hidden = kw.tensor("hidden");
    const double a_gs = kw.real("hidden_states_scale_global", 0.0);
    kw.finish();
    stepfun::StepFunActivations a;
    {
      nb::gil_scoped_release release;
      a = stepfun::prepare_activations(family, hidden, a_gs);
    }
    return activations_dict(a);
  });

  m.def("plans_for", [](nb::dict kwargs) {
    Kwargs kw(kwargs, "plans_for");
    return stepfun::plans_for(problem_desc(kw));
  });
  m.def("default_plan", [](nb::dict kwargs) {
    Kwargs kw(kwargs, "default_plan");
    return stepfun::default_plan(problem_desc(kw));
  });
  m.def("max_padded", [](nb::dict kwargs) {
    Kwargs kw(kwargs, "max_padded");
    const int64_t t = kw.integer("num_tokens", std::nullopt), k = kw.integer("top_k", std::nullopt);
    const int64_t e = kw.integer("num_experts", std::nullopt);
    const int64_t tile = kw.integer("tile_tokens_dim", std::nullopt);
    kw.finish();
    return stepfun::max_padded(t, k, e, tile);
  });
  m.def("max_ctas", [](nb::dict kwargs) {
    Kwargs kw(kwargs, "max_ctas");
    const int64_t t = kw.integer("num_tokens", std::nullopt), k = kw.integer("top_k", std::nullopt);
    const int64_t e = kw.integer("num_experts", std::nullopt);
    const int64_t tile = kw.integer("tile_tokens_dim", std::nullopt);
    kw.finish();
    return stepfun::max_ctas(t, k, e, tile);
  });
}

}  // namespace python
}  // namespace cakemoe
