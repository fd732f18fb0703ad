// _copy_rows: kvtier_copy_rows (the C ABI's engine helper) for kvtier.hf's assembly of a layer's keys and values on the CPU
// (kvtier/_rows.py, kvtier.copy_rows, checks the tensors and passes their addresses: a DLPack conversion per
// tensor would cost more than the copy of a short row list). Bad indices raise
// kvtier.InvalidArgumentError and copy nothing.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.hpp"
#include "kvtier/kvtier.h"
#include "py_client.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace kvtier::python {
namespace {

using Rows = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// (address, token stride, head stride), bytes.
using View = std::tuple<std::uintptr_t, std::size_t, std::size_t>;

kvtier_head_rows head_rows(const View& v, std::size_t rows) {
  return {reinterpret_cast<void*>(std::get<0>(v)), rows, std::get<1>(v), std::get<2>(v)};
}

// One kernel call per (dst[i], src[i]) pair (a layer's K and V), stopping at the first error.
void copy_rows(const std::vector<View>& dst, std::size_t dst_rows, const std::vector<View>& src,
               std::size_t src_rows, std::size_t heads, std::size_t row_bytes, const Rows& from, const Rows& to) {
  if (dst.size() != src.size()) {
    throw StatusError(KVTIER_E_INVALID_ARGUMENT, "copy_rows: " + std::to_string(src.size()) + " sources for " +
                                                     std::to_string(dst.size()) + " destinations");
  }
  if (from.size() != to.size()) {
    throw StatusError(KVTIER_E_INVALID_ARGUMENT, "copy_rows: " + std::to_string(from.size()) + " source rows for " +
                                                     std::to_string(to.size()) + " destinations");
  }
  kvtier_status done = KVTIER_OK;
  {
    nb::gil_scoped_release release;
    for (std::size_t i = 0; i < dst.size() && done == KVTIER_OK; ++i) {
      const kvtier_head_rows d = head_rows(dst[i], dst_rows), s = head_rows(src[i], src_rows);
      done = kvtier_copy_rows(&d, &s, heads, row_bytes, from.data(), to.data(), from.size());
    }
  }
  if (done != KVTIER_OK) throw StatusError(done, kvtier_client_last_error(nullptr));
}

}  // namespace

void bind_rows(nb::module_& m) {
  m.def("_copy_rows", &copy_rows, "dst"_a, "dst_rows"_a, "src"_a, "src_rows"_a, "heads"_a, "row_bytes"_a,
        "from_rows"_a, "to_rows"_a,
        "kvtier_copy_rows for each pair (dst[i], src[i]) of host views (address, token stride, head stride in "
        "bytes). Private: kvtier.copy_rows checks the tensors and calls it.");
}

}  // namespace kvtier::python
