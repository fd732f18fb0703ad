// Which table of int8 loops a process uses (quantize_loops.hpp): the widest one this build has
// and this CPU runs, chosen on first use by a function-local static (thread-safe; no ifunc, so
// it works under ThreadSanitizer and AddressSanitizer).
#include <string_view>

#include "kvtier/kernels/quantize.hpp"
#include "quantize_loops.hpp"

namespace kvtier::kernels {
namespace detail {

const Int8Loops* int8_loops_for(Int8Isa isa) noexcept {
  switch (isa) {
    case Int8Isa::kScalar: return &scalar_int8_loops();
    case Int8Isa::kAvx2: return avx2_int8_loops();
    case Int8Isa::kAvx512: return avx512_int8_loops();
  }
  return nullptr;
}

const Int8Loops& default_int8_loops() noexcept {
  static const Int8Loops& chosen = []() -> const Int8Loops& {
    for (Int8Isa isa : {Int8Isa::kAvx512, Int8Isa::kAvx2}) {
      if (const Int8Loops* loops = int8_loops_for(isa)) return *loops;
    }
    return scalar_int8_loops();
  }();
  return chosen;
}

}  // namespace detail

std::string_view int8_isa_name(Int8Isa isa) noexcept {
  switch (isa) {
    case Int8Isa::kScalar: return "scalar";
    case Int8Isa::kAvx2: return "avx2";
    case Int8Isa::kAvx512: return "avx512";
  }
  return "unknown";
}

bool int8_isa_available(Int8Isa isa) noexcept { return detail::int8_loops_for(isa) != nullptr; }

Int8Isa int8_isa() noexcept { return detail::default_int8_loops().isa; }

}  // namespace kvtier::kernels
