// The StepFun EP entries of `cakemoe._cakemoe` (include/cakemoe/stepfun_ep.h): NCCL unique ids,
// owned communicators, and the prepared EP layer. The Python layer (python/cakemoe/stepfun_ep.py)
// adds the torch.distributed bootstrap, streams and devices. Every argument is checked for its
// Python type here, so a wrong one is a typed error naming it, never a signature mismatch.
#include "stepfun_ep_binding.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "cakemoe/stepfun_ep.h"
#include "kwargs.h"
#include "stepfun_args.h"
#include "views.h"

namespace nb = nanobind;

namespace cakemoe {
namespace python {
namespace {

namespace ep = stepfun::ep;

Stream to_stream(uintptr_t handle) { return reinterpret_cast<Stream>(handle); }

int narrow(Kwargs& kw, const std::string& name) {
  const int64_t value = kw.integer(name, std::nullopt);
  if (value < INT_MIN || value > INT_MAX) {
    throw InvalidArgument(name, "must fit in int32, got " + std::to_string(value));
  }
  return static_cast<int>(value);
}

std::vector<uint8_t> id_bytes(nb::handle id) {
  if (!nb::isinstance<nb::bytes>(id)) {
    throw ArgumentTypeError("unique_id",
                            "must be bytes (from new_unique_id()), got " + python_type_name(id));
  }
  const nb::bytes b = nb::borrow<nb::bytes>(id);
  const auto* data = static_cast<const uint8_t*>(b.data());
  return std::vector<uint8_t>(data, data + b.size());
}

ep::OwnedCommunicator create_communicator(nb::dict kwargs) {
  Kwargs kw(kwargs, "from_unique_id");
  const std::vector<uint8_t> id = id_bytes(kw.object("unique_id"));
  const int rank = narrow(kw, "rank");
  const int world_size = narrow(kw, "world_size");
  const int device = narrow(kw, "device");
  kw.finish();
  // NOTE: ncclCommInitRank waits for every rank; other Python threads keep running meanwhile.
  nb::gil_scoped_release release;
  return ep::create_communicator(id, rank, world_size, device);
}

ep::Scheme scheme_of(nb::handle scheme) {
  if (!nb::isinstance<nb::str>(scheme)) {
    throw ArgumentTypeError(
        "scheme", "must be a str (all_to_all or all_gather), got " + python_type_name(scheme));
  }
  return ep::parse_scheme(nb::cast<std::string>(scheme));
}

// Order: scheme, comm, then the layer's keywords (each names itself).
ep::EpLaunch prepare_ep(nb::handle comm, nb::handle scheme, nb::dict kwargs) {
  ep::EpArgs args;
  args.scheme = scheme_of(scheme);
  if (!nb::isinstance<ep::OwnedCommunicator>(comm)) {
    throw ArgumentTypeError("comm",
                            "must be a cakemoe.stepfun_ep.Communicator (for instance "
                            "Communicator.from_process_group(group)), got " +
                                python_type_name(comm));
  }
  const ep::OwnedCommunicator& owned = nb::cast<const ep::OwnedCommunicator&>(comm);
  if (owned.get() == nullptr) throw InvalidArgument("comm", "holds no communicator");
  args.comm = owned.get();
  Kwargs kw(kwargs, "prepare_ep");
  args.layer = moe_args(kw);
  // NOTE: prepare is collective (it waits for the other ranks): the GIL is released meanwhile.
  nb::gil_scoped_release release;
  return ep::prepare(args);
}

nb::dict sizes_dict(const ep::EpSizes& s) {
  nb::dict d;
  d["world_size"] = s.world_size;
  d["rank"] = s.rank;
  d["num_tokens"] = s.num_tokens;
  d["rows_per_peer"] = s.rows_per_peer;
  d["layer_rows"] = s.layer_rows;
  d["dispatch_row_bytes"] = s.dispatch_row_bytes;
  d["combine_row_bytes"] = s.combine_row_bytes;
  d["dispatch_wire_bytes"] = s.dispatch_wire_bytes;
  d["combine_wire_bytes"] = s.combine_wire_bytes;
  return d;
}

void register_launch(nb::module_& m) {
  using L = ep::EpLaunch;
  nb::class_<L>(m, "EpLaunchCore")
      .def(
          "launch", [](const L& l, uintptr_t stream) { l.launch(to_stream(stream)); },
          nb::arg("stream"), nb::call_guard<nb::gil_scoped_release>())
      .def(
          "launch_dispatch",
          [](const L& l, uintptr_t stream) { l.launch_dispatch(to_stream(stream)); },
          nb::arg("stream"), nb::call_guard<nb::gil_scoped_release>())
      .def(
          "launch_layer", [](const L& l, uintptr_t stream) { l.launch_layer(to_stream(stream)); },
          nb::arg("stream"), nb::call_guard<nb::gil_scoped_release>())
      .def(
          "launch_combine",
          [](const L& l, uintptr_t stream) { l.launch_combine(to_stream(stream)); },
          nb::arg("stream"), nb::call_guard<nb::gil_scoped_release>())
      .def("output",
           [](nb::handle self) { return view_ref(nb::cast<const L&>(self).output(), self); })
      .def("received_counts",
           [](nb::handle self) {
             return view_ref(nb::cast<const L&>(self).received_counts(), self);
           })
      .def_prop_ro("sizes", [](const L& l) { return sizes_dict(l.sizes()); })
      .def_prop_ro("plan", [](const L& l) { return l.plan(); });
}

}  // namespace

void register_stepfun_ep(nb::module_& m) {
  nb::class_<ep::OwnedCommunicator>(m, "EpCommunicatorCore")
      .def_prop_ro("rank", &ep::OwnedCommunicator::rank)
      .def_prop_ro("world_size", &ep::OwnedCommunicator::world_size)
      .def_prop_ro("device", &ep::OwnedCommunicator::device)
      .def_prop_ro("valid", [](const ep::OwnedCommunicator& c) { return c.get() != nullptr; });
  register_launch(m);
  m.attr("ep_unique_id_bytes") = ep::kUniqueIdBytes;
  m.def("ep_available", &ep::available);
  m.def("ep_new_unique_id", [] {
    const std::vector<uint8_t> id = ep::new_unique_id();
    return nb::bytes(id.data(), id.size());
  });
  m.def("ep_create_communicator", &create_communicator, nb::arg("kwargs"));
  m.def("prepare_ep", &prepare_ep, nb::arg("comm").none(), nb::arg("scheme").none(),
        nb::arg("kwargs"));
}

}  // namespace python
}  // namespace cakemoe
