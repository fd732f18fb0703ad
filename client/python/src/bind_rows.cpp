// _copy_rows: kernels::copy_rows for kvtier.hf's assembly of a layer's keys and values on the CPU
// (kvtier/hf/assemble.py checks the tensors and passes their addresses: a DLPack conversion per
// tensor would cost more than the copy of a short row list). Bad indices raise
// kvtier.InvalidArgumentError and copy nothing.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "kvtier/kernels/gather.hpp"
#include "py_client.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace kvtier::python {
namespace {

using Rows = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

kernels::HeadRows view(std::uintptr_t base, std::size_t rows, std::size_t token_stride, std::size_t head_stride) {
  return {reinterpret_cast<std::byte*>(base), rows, token_stride, head_stride};
}

// One call per (dst, src) pair of addresses; the pairs share geometry (a layer's K and V).
void copy_rows(const std::vector<std::uintptr_t>& dst, std::size_t dst_rows, std::size_t dst_token_stride,
               std::size_t dst_head_stride, const std::vector<std::uintptr_t>& src, std::size_t src_rows,
               std::size_t src_token_stride, std::size_t src_head_stride, std::size_t heads, std::size_t row_bytes,
               const Rows& from, const Rows& to) {
  if (dst.size() != src.size()) {
    throw StatusError(KVTIER_E_INVALID_ARGUMENT, "copy_rows: " + std::to_string(src.size()) + " sources for " +
                                                     std::to_string(dst.size()) + " destinations");
  }
  Status done;
  {
    nb::gil_scoped_release release;
    for (std::size_t i = 0; i < dst.size() && done; ++i) {
      done = kernels::copy_rows(view(dst[i], dst_rows, dst_token_stride, dst_head_stride),
                                view(src[i], src_rows, src_token_stride, src_head_stride), heads, row_bytes,
                                {from.data(), from.size()}, {to.data(), to.size()});
    }
  }
  if (!done) throw StatusError(KVTIER_E_INVALID_ARGUMENT, done.error().message);
}

}  // namespace

void bind_rows(nb::module_& m) {
  m.def("_copy_rows", &copy_rows, "dst"_a, "dst_rows"_a, "dst_token_stride"_a, "dst_head_stride"_a, "src"_a,
        "src_rows"_a, "src_token_stride"_a, "src_head_stride"_a, "heads"_a, "row_bytes"_a, "from_rows"_a,
        "to_rows"_a,
        "kernels::copy_rows for each (dst[i], src[i]) pair of host addresses of one geometry (kernels/include/kvtier/kernels/gather.hpp). Private: "
        "kvtier.hf.assemble.copy_rows checks the tensors and calls it.");
}

}  // namespace kvtier::python
