// The pieces of the _kvtier extension module, each registered by one function (module.cpp calls
// them in order: enums and value types before the Client class that returns them).
#pragma once

#include <nanobind/nanobind.h>

namespace kvtier::python {

void bind_enums(nanobind::module_& m);
void bind_types(nanobind::module_& m);
void bind_client(nanobind::module_& m);
void bind_scores(nanobind::module_& m);
void bind_rows(nanobind::module_& m);

}  // namespace kvtier::python
