// _kvtier: the extension module behind the `kvtier` package. Errors: a failed C call surfaces as
// StatusError in C++, which the translator below raises as kvtier.KvtierError (the subclass for
// its status, built by kvtier._errors.from_status) with .status, .status_name and .message.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <exception>
#include <string>

#include "bindings.hpp"
#include "kvtier/kvtier.h"
#include "py_client.hpp"

namespace nb = nanobind;

namespace kvtier::python {
namespace {

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const StatusError& e) {
    // The translator runs with the GIL held. If the error module itself cannot be imported,
    // fall back to RuntimeError so the failure is never lost.
    try {
      nb::object exc = nb::module_::import_("kvtier._errors").attr("from_status")(static_cast<int>(e.status()),
                                                                                   std::string(e.what()));
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    } catch (const nb::python_error&) {
      PyErr_SetString(PyExc_RuntimeError,
                      (std::string(kvtier_status_string(e.status())) + ": " + e.what()).c_str());
    }
  }
}

}  // namespace
}  // namespace kvtier::python

NB_MODULE(_kvtier, m) {
  m.doc() = "Low-level binding of libkvtier's C ABI (kvtier.h). Import `kvtier` instead.";
  nb::register_exception_translator(&kvtier::python::translate);
  kvtier::python::bind_enums(m);
  kvtier::python::bind_types(m);
  kvtier::python::bind_client(m);
  kvtier::python::bind_scores(m);
  kvtier::python::bind_rows(m);

  m.def(
      "status_string", [](kvtier_status s) { return std::string(kvtier_status_string(s)); }, nb::arg("status"),
      "The library's name of a status (\"ok\", \"invalid_argument\", ...).");
  m.def(
      "default_socket_path", [] { return std::string(kvtier_default_socket_path()); },
      "The socket used when none is given: $KVTIER_SOCKET, else /run/kvtier/kvtierd.sock.");
  m.attr("NO_SLOT") = KVTIER_NO_SLOT;
}
