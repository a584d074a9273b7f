#include "kwargs.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cmath>
#include <utility>

#include "dlpack_views.h"

namespace nb = nanobind;

namespace cakemoe {
namespace python {
namespace {

bool is_bool(nb::handle o) {
  if (PyBool_Check(o.ptr())) return true;
  const std::string name = nb::type_name(o.type()).c_str();
  return name == "numpy.bool" || name == "numpy.bool_";
}

// NOTE: PyIndex_Check is what operator.index accepts: int and numpy integers, not float or str.
bool is_integer(nb::handle o) { return !is_bool(o) && PyIndex_Check(o.ptr()); }

bool is_real(nb::handle o) {
  return !is_bool(o) && (PyFloat_Check(o.ptr()) || is_integer(o) ||
                         nb::type_name(o.type()).c_str() == std::string("numpy.float32"));
}

}  // namespace

std::string python_type_name(nb::handle object) { return nb::type_name(object.type()).c_str(); }

Kwargs::Kwargs(nb::dict kwargs, std::string call)
    : kwargs_(std::move(kwargs)), call_(std::move(call)) {
  for (auto item : kwargs_) {
    if (!nb::isinstance<nb::str>(item.first)) {
      throw ArgumentTypeError(call_, "keyword names must be strings");
    }
  }
}

nb::handle Kwargs::lookup(const std::string& name) {
  read_.insert(name);
  nb::str key(name.c_str());
  if (!kwargs_.contains(key)) return nb::none();
  return kwargs_[key];
}

bool Kwargs::has(const std::string& name) const {
  nb::str key(name.c_str());
  return kwargs_.contains(key) && !kwargs_[key].is_none();
}

void Kwargs::type_error(const std::string& name, const std::string& expected,
                        nb::handle got) const {
  throw ArgumentTypeError(name, "must be " + expected + ", got " + python_type_name(got));
}

TensorView Kwargs::tensor(const std::string& name, Access access) {
  const nb::handle o = lookup(name);
  if (o.is_none()) return TensorView();
  AnyArray array;
  if (!nb::try_cast(o, array, false)) {
    type_error(name, "a torch tensor or numpy array (anything with __dlpack__)", o);
  }
  if (access == Access::kWrite) {
    nb::ndarray<> writable;
    if (!nb::try_cast(o, writable, false)) {
      throw InvalidArgument(name, "is read-only; the call writes it (pass a writable array)");
    }
  }
  return to_view(array, name);
}

std::vector<TensorView> Kwargs::tensor_list(const std::string& name) {
  const nb::handle o = lookup(name);
  if (o.is_none()) throw ArgumentTypeError(name, "is a required argument of " + call_ + "()");
  if (!nb::isinstance<nb::list>(o) && !nb::isinstance<nb::tuple>(o)) {
    type_error(name, "a list of tensors", o);
  }
  std::vector<TensorView> views;
  for (nb::handle item : o) {
    const std::string item_name = name + "[" + std::to_string(views.size()) + "]";
    AnyArray array;
    if (!nb::try_cast(item, array, false))
      type_error(item_name, "a torch tensor or numpy array", item);
    views.push_back(to_view(array, item_name));
  }
  return views;
}

int64_t Kwargs::integer(const std::string& name, std::optional<int64_t> fallback) {
  const nb::handle o = lookup(name);
  if (o.is_none()) {
    if (!fallback) throw ArgumentTypeError(name, "is a required argument of " + call_ + "()");
    return *fallback;
  }
  if (!is_integer(o)) type_error(name, "an int", o);
  const nb::object index = nb::steal(PyNumber_Index(o.ptr()));
  if (!index.is_valid()) throw nb::python_error();
  int overflow = 0;
  const long long value = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0) throw InvalidArgument(name, "does not fit in int64");
  return static_cast<int64_t>(value);
}

double Kwargs::real(const std::string& name, double fallback) {
  const std::optional<double> value = optional_real(name);
  return value ? *value : fallback;
}

std::optional<double> Kwargs::optional_real(const std::string& name) {
  const nb::handle o = lookup(name);
  if (o.is_none()) return std::nullopt;
  if (!is_real(o)) type_error(name, "a float", o);
  const double value = PyFloat_AsDouble(o.ptr());
  if (value == -1.0 && PyErr_Occurred()) throw nb::python_error();
  return value;
}

bool Kwargs::flag(const std::string& name, bool fallback) {
  return optional_flag(name).value_or(fallback);
}

std::optional<bool> Kwargs::optional_flag(const std::string& name) {
  const nb::handle o = lookup(name);
  if (o.is_none()) return std::nullopt;
  if (!is_bool(o)) type_error(name, "a bool", o);
  return PyObject_IsTrue(o.ptr()) == 1;
}

std::string Kwargs::text(const std::string& name, const std::string& fallback) {
  const nb::handle o = lookup(name);
  if (o.is_none()) return fallback;
  if (!nb::isinstance<nb::str>(o)) type_error(name, "a str", o);
  return nb::cast<std::string>(o);
}

std::vector<float> Kwargs::reals(const std::string& name) {
  const nb::handle o = lookup(name);
  if (o.is_none()) return {};
  if (is_real(o)) return {static_cast<float>(PyFloat_AsDouble(o.ptr()))};
  if (!nb::isinstance<nb::list>(o) && !nb::isinstance<nb::tuple>(o)) {
    type_error(name, "a float or a list of floats", o);
  }
  std::vector<float> values;
  size_t i = 0;
  for (nb::handle item : o) {
    if (!is_real(item)) type_error(name + "[" + std::to_string(i) + "]", "a float", item);
    values.push_back(static_cast<float>(PyFloat_AsDouble(item.ptr())));
    ++i;
  }
  return values;
}

stepfun::Family Kwargs::family(const std::string& name) {
  const nb::handle o = lookup(name);
  if (o.is_none()) throw ArgumentTypeError(name, "is a required argument of " + call_ + "()");
  if (!nb::isinstance<nb::str>(o)) type_error(name, "a family name (str)", o);
  return stepfun::parse_family(nb::cast<std::string>(o));
}

std::optional<stepfun::Plan> Kwargs::plan(const std::string& name) {
  const nb::handle o = lookup(name);
  if (o.is_none()) return std::nullopt;
  stepfun::Plan plan;
  if (!nb::try_cast(o, plan, false)) type_error(name, "a cakemoe.Plan", o);
  return plan;
}

nb::handle Kwargs::object(const std::string& name) { return lookup(name); }

void Kwargs::finish() const {
  for (auto item : kwargs_) {
    const std::string key = nb::cast<std::string>(item.first);
    if (read_.count(key) == 0) {
      throw ArgumentTypeError(key, "is not an argument of " + call_ + "()");
    }
  }
}

}  // namespace python
}  // namespace cakemoe
