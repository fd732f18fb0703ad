// KvLayout validation and constructors for the common engine layouts.
#include "kvtier/kernels/kv_layout.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

namespace kvtier::kernels {
namespace {

Status invalid(std::string message) {
  return make_error(Errc::kInvalidArgument, "kv layout: " + std::move(message));
}

std::string num(std::size_t value) { return std::to_string(value); }

// acc += a * b; false on overflow.
bool add_product(std::uint64_t a, std::uint64_t b, std::uint64_t& acc) noexcept {
  std::uint64_t product = 0;
  return !__builtin_mul_overflow(a, b, &product) && !__builtin_add_overflow(acc, product, &acc);
}

// layer_extent_bytes, nullopt when a stride product or sum overflows 64 bits.
std::optional<std::uint64_t> checked_layer_extent(const KvLayout& layout) noexcept {
  if (layout.num_slots == 0 || layout.block_size == 0 || layout.num_kv_heads == 0) return 0;
  // One past the last byte of the last KV head of `slot`.
  const auto slot_end = [&layout](std::uint32_t slot) -> std::optional<std::uint64_t> {
    std::uint64_t end = layout.head_bytes();
    if (!add_product(slot / layout.block_size, layout.block_stride, end) ||
        !add_product(slot % layout.block_size, layout.token_stride, end) ||
        !add_product(layout.num_kv_heads - 1, layout.head_stride, end)) {
      return std::nullopt;
    }
    return end;
  };
  const std::uint32_t last = layout.num_slots - 1;
  auto end = slot_end(last);
  if (last / layout.block_size > 0) {  // a full block before the last one may reach further
    auto full = slot_end(last / layout.block_size * layout.block_size - 1);
    if (!end || !full) return std::nullopt;
    end = std::max(*end, *full);
  }
  return end;
}

// Highest in-block byte offset a (token, head) extent ends at, for `tokens` slots in a block.
std::size_t block_extent(const KvLayout& layout, std::size_t tokens) noexcept {
  return (tokens - 1) * layout.token_stride + (layout.num_kv_heads - 1) * layout.head_stride +
         layout.head_bytes();
}

// `extent`: the layer's checked extent; a base it would carry past the end of the address space
// is refused (an executor adds offsets up to it to the base).
Status validate_pointers(const KvLayout& layout, const std::vector<std::uintptr_t>& bases,
                         std::string_view which, std::uint64_t extent) {
  if (bases.size() != layout.num_layers) {
    return invalid(std::string(which) + " has " + num(bases.size()) + " layer pointers, expected " +
                   num(layout.num_layers));
  }
  const std::size_t align = dtype_bytes(layout.dtype);
  for (std::size_t l = 0; l < bases.size(); ++l) {
    if (bases[l] == 0) return invalid(std::string(which) + "[" + num(l) + "] is null");
    if (bases[l] % align != 0) {
      return invalid(std::string(which) + "[" + num(l) + "] is not aligned to " + num(align) +
                     " bytes");
    }
    if (extent > ~std::uintptr_t{0} - bases[l]) {
      return invalid(std::string(which) + "[" + num(l) + "] plus the layer's " + num(extent) +
                     " bytes wraps past the end of the address space");
    }
  }
  return {};
}

// Every (token in block, head) extent must be disjoint: either heads nest inside a token
// (token_stride covers all heads) or tokens nest inside a head (head_stride covers the block).
Status validate_strides(const KvLayout& layout) {
  const std::size_t hb = layout.head_bytes();
  const std::size_t heads = layout.num_kv_heads;
  const std::size_t tokens = std::min(layout.block_size, layout.num_slots);
  if (tokens > 1 && layout.token_stride < hb) {
    return invalid("token_stride " + num(layout.token_stride) + " < head bytes " + num(hb));
  }
  if (heads > 1 && layout.head_stride < hb) {
    return invalid("head_stride " + num(layout.head_stride) + " < head bytes " + num(hb));
  }
  const std::size_t need_token = (heads - 1) * layout.head_stride + hb;
  const std::size_t need_head = (tokens - 1) * layout.token_stride + hb;
  const bool heads_inside = tokens <= 1 || layout.token_stride >= need_token;
  const bool tokens_inside = heads <= 1 || layout.head_stride >= need_head;
  if (!heads_inside && !tokens_inside) {
    return invalid("token_stride " + num(layout.token_stride) + " and head_stride " +
                   num(layout.head_stride) + " overlap: need token_stride >= " + num(need_token) +
                   " (heads inside a token) or head_stride >= " + num(need_head) +
                   " (tokens inside a head)");
  }
  if (layout.num_slots > layout.block_size) {
    const std::size_t extent = block_extent(layout, tokens);
    if (layout.block_stride < extent) {
      return invalid("block_stride " + num(layout.block_stride) + " < bytes of one block " +
                     num(extent));
    }
  }
  const std::size_t es = dtype_bytes(layout.dtype);
  if (layout.token_stride % es != 0 || layout.head_stride % es != 0 ||
      layout.block_stride % es != 0) {
    return invalid("strides must be multiples of the element size " + num(es));
  }
  return {};
}

// a * b, or SIZE_MAX when that overflows: a constructor's saturated stride makes validate()
// refuse the layout (its extent check overflows) wherever the stride is used.
std::size_t saturating_mul(std::size_t a, std::size_t b) noexcept {
  std::size_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? ~std::size_t{0} : product;
}

// num_blocks * block_size, or 0 (refused by validate()) when it exceeds a 32-bit slot index.
std::uint32_t paged_slots(std::uint32_t num_blocks, std::uint32_t block_size) noexcept {
  const std::uint64_t slots = std::uint64_t{num_blocks} * block_size;
  return slots > ~std::uint32_t{0} ? 0 : static_cast<std::uint32_t>(slots);
}

KvLayout shape(std::uint32_t num_layers, std::uint32_t num_kv_heads, std::uint32_t head_dim,
               KvDtype dtype, std::uint32_t num_slots, std::uint32_t block_size,
               std::vector<std::uintptr_t> k_base, std::vector<std::uintptr_t> v_base) {
  KvLayout layout;
  layout.num_layers = num_layers;
  layout.num_kv_heads = num_kv_heads;
  layout.head_dim = head_dim;
  layout.dtype = dtype;
  layout.num_slots = num_slots;
  layout.block_size = block_size;
  layout.k_base = std::move(k_base);
  layout.v_base = std::move(v_base);
  return layout;
}

}  // namespace

std::string_view dtype_name(KvDtype dtype) noexcept {
  switch (dtype) {
    case KvDtype::kF16:
      return "f16";
    case KvDtype::kBf16:
      return "bf16";
    case KvDtype::kF32:
      return "f32";
  }
  return "unknown";
}

Status validate(const KvLayout& layout) {
  if (dtype_bytes(layout.dtype) == 0) {
    return invalid("unknown dtype " + num(static_cast<std::size_t>(layout.dtype)));
  }
  if (layout.num_layers == 0) return invalid("num_layers is 0");
  if (layout.num_kv_heads == 0) return invalid("num_kv_heads is 0");
  if (layout.head_dim == 0) return invalid("head_dim is 0");
  if (layout.num_slots == 0) return invalid("num_slots is 0");
  if (layout.block_size == 0) return invalid("block_size is 0");
  const auto extent = checked_layer_extent(layout);
  if (!extent) return invalid("strides overflow: a layer spans more than 2^64 bytes");
  if (auto s = validate_pointers(layout, layout.k_base, "k_base", *extent); !s) return s;
  if (auto s = validate_pointers(layout, layout.v_base, "v_base", *extent); !s) return s;
  return validate_strides(layout);
}

std::size_t layer_extent_bytes(const KvLayout& layout) noexcept {
  return checked_layer_extent(layout).value_or(~std::size_t{0});
}

KvLayout make_hf_layout(std::uint32_t num_layers, std::uint32_t num_kv_heads,
                        std::uint32_t head_dim, KvDtype dtype, std::uint32_t num_slots,
                        std::vector<std::uintptr_t> k_base, std::vector<std::uintptr_t> v_base) {
  KvLayout layout = shape(num_layers, num_kv_heads, head_dim, dtype, num_slots, num_slots,
                          std::move(k_base), std::move(v_base));
  layout.token_stride = layout.head_bytes();
  layout.head_stride = saturating_mul(layout.head_bytes(), num_slots);
  layout.block_stride = saturating_mul(layout.head_stride, num_kv_heads);
  return layout;
}

KvLayout make_paged_layout(std::uint32_t num_layers, std::uint32_t num_kv_heads,
                           std::uint32_t head_dim, KvDtype dtype, std::uint32_t num_blocks,
                           std::uint32_t block_size, std::vector<std::uintptr_t> k_base,
                           std::vector<std::uintptr_t> v_base) {
  KvLayout layout = shape(num_layers, num_kv_heads, head_dim, dtype, paged_slots(num_blocks, block_size),
                          block_size, std::move(k_base), std::move(v_base));
  layout.head_stride = layout.head_bytes();
  layout.token_stride = saturating_mul(layout.head_bytes(), num_kv_heads);
  layout.block_stride = saturating_mul(layout.token_stride, block_size);
  return layout;
}

KvLayout make_paged_hnd_layout(std::uint32_t num_layers, std::uint32_t num_kv_heads,
                               std::uint32_t head_dim, KvDtype dtype, std::uint32_t num_blocks,
                               std::uint32_t block_size, std::vector<std::uintptr_t> k_base,
                               std::vector<std::uintptr_t> v_base) {
  KvLayout layout = shape(num_layers, num_kv_heads, head_dim, dtype, paged_slots(num_blocks, block_size),
                          block_size, std::move(k_base), std::move(v_base));
  layout.token_stride = layout.head_bytes();
  layout.head_stride = saturating_mul(layout.head_bytes(), block_size);
  layout.block_stride = saturating_mul(layout.head_stride, num_kv_heads);
  return layout;
}

}  // namespace kvtier::kernels
