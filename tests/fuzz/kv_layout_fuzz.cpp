// Fuzz target: KvLayout validation (kernels/kv_layout.hpp) and the layout constructors.
//
// Input (fuzz_input.hpp): u8 maker (0 raw, 1 hf, 2 paged, 3 paged_hnd), u8 dtype (raw, may be
// unknown), u32 num_layers, num_kv_heads, head_dim, num_slots (num_blocks for the paged makers),
// block_size, u64 token_stride, head_stride, block_stride (raw only), u8 pointer mode (0: aligned
// synthetic bases, 1: every base taken from the input), then (u32 slot, u32 head) pairs to probe.
//
// What it checks beyond "no crash, no sanitizer report": whenever validate() accepts a layout,
// layer_extent_bytes() is exact, every probed (slot, head) extent lies inside it without
// wrapping and apart from every other probed one, no layer's pointer plus its extent wraps past
// 2^64, and a constructor's layout describes exactly the tensor it was asked for.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <vector>

#include "fuzz_input.hpp"
#include "kvtier/kernels/kv_layout.hpp"

namespace {

using kvtier::fuzz::FuzzInput;
using kvtier::kernels::KvDtype;
using kvtier::kernels::KvLayout;
using u128 = unsigned __int128;

constexpr std::size_t kMaxLayers = 64;  // pointer lists longer than this are not built

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "kv_layout_fuzz: property violated: %s\n", what);
  std::abort();
}

struct Probe {
  std::uint32_t slot, head;
};

u128 extent_start(const KvLayout& l, const Probe& p) {
  return u128{p.slot / l.block_size} * l.block_stride + u128{p.slot % l.block_size} * l.token_stride +
         u128{p.head} * l.head_stride;
}

void check_accepted(const KvLayout& l, FuzzInput& in) {
  const std::size_t ext = kvtier::kernels::layer_extent_bytes(l);
  if (ext == ~std::size_t{0}) fail("validate accepted a layout whose extent does not fit 64 bits");
  const u128 hb = l.head_bytes();
  for (std::uint32_t layer = 0; layer < l.num_layers; ++layer) {
    if (u128{l.k_base[layer]} + ext > (u128{1} << 64) || u128{l.v_base[layer]} + ext > (u128{1} << 64)) {
      fail("a layer's pointer plus its extent wraps past 2^64");
    }
  }
  std::vector<Probe> probes;
  const std::uint32_t last = l.num_slots - 1, bs = l.block_size;
  for (std::uint32_t slot : {0u, last, bs - 1, bs, last / bs * bs, last / bs * bs - 1}) {
    if (slot < l.num_slots) {
      probes.push_back({slot, 0});
      probes.push_back({slot, l.num_kv_heads - 1});
    }
  }
  for (int i = 0; i < 8 && !in.empty(); ++i) {
    probes.push_back({in.take<std::uint32_t>() % l.num_slots, in.take<std::uint32_t>() % l.num_kv_heads});
  }
  u128 highest = 0;
  for (const Probe& p : probes) {
    const u128 start = extent_start(l, p);
    if (start + hb > ext) fail("a (slot, head) extent ends beyond layer_extent_bytes");
    if (u128{l.slot_offset(p.slot)} != start - u128{p.head} * l.head_stride) fail("slot_offset wrapped");
    if (start + hb > highest) highest = start + hb;
  }
  for (std::size_t i = 0; i < probes.size(); ++i) {
    for (std::size_t j = i + 1; j < probes.size(); ++j) {
      if (probes[i].slot == probes[j].slot && probes[i].head == probes[j].head) continue;
      const u128 a = extent_start(l, probes[i]), b = extent_start(l, probes[j]);
      if (a < b + hb && b < a + hb) fail("two (slot, head) extents overlap");
    }
  }
  if (highest != ext) {
    // The last slot and the last slot of the last full block, with the last head, reach the end.
    fail("layer_extent_bytes is larger than the highest extent end");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  const auto maker = in.below<std::uint8_t>(4);
  const auto dtype = static_cast<KvDtype>(in.take<std::uint8_t>());
  const auto layers = in.take<std::uint32_t>(), heads = in.take<std::uint32_t>(), dim = in.take<std::uint32_t>();
  const auto slots = in.take<std::uint32_t>(), block = in.take<std::uint32_t>();
  const auto token_stride = in.take<std::uint64_t>(), head_stride = in.take<std::uint64_t>(),
             block_stride = in.take<std::uint64_t>();
  const bool raw_pointers = in.flag();

  std::vector<std::uintptr_t> k, v;
  const std::size_t n = std::min<std::size_t>(layers, kMaxLayers);
  for (std::size_t l = 0; l < n; ++l) {
    if (raw_pointers) {
      k.push_back(in.take<std::uint64_t>());
      v.push_back(in.take<std::uint64_t>());
    } else {
      k.push_back((std::uintptr_t{2 * l + 1}) << 40);
      v.push_back((std::uintptr_t{2 * l + 2}) << 40);
    }
  }
  KvLayout layout;
  switch (maker) {
    case 0:
      layout.num_layers = layers;
      layout.num_kv_heads = heads;
      layout.head_dim = dim;
      layout.dtype = dtype;
      layout.num_slots = slots;
      layout.block_size = block;
      layout.token_stride = token_stride;
      layout.head_stride = head_stride;
      layout.block_stride = block_stride;
      layout.k_base = std::move(k);
      layout.v_base = std::move(v);
      break;
    case 1: layout = kvtier::kernels::make_hf_layout(layers, heads, dim, dtype, slots, std::move(k), std::move(v)); break;
    case 2:
      layout = kvtier::kernels::make_paged_layout(layers, heads, dim, dtype, slots, block, std::move(k), std::move(v));
      break;
    default:
      layout = kvtier::kernels::make_paged_hnd_layout(layers, heads, dim, dtype, slots, block, std::move(k),
                                                     std::move(v));
      break;
  }
  if (!kvtier::kernels::validate(layout)) return 0;
  check_accepted(layout, in);
  if (maker != 0) {
    // The constructor describes the tensor asked for, not a wrapped-around one: the slot count,
    // and where each probed (slot, head) lies in that tensor.
    const u128 hb = u128{dim} * kvtier::kernels::dtype_bytes(dtype);
    const u128 want_slots = maker == 1 ? u128{slots} : u128{slots} * block;
    if (layout.num_slots != want_slots) fail("a constructor's slot count wrapped");
    FuzzInput probes(data, size);  // any numbers will do
    for (int i = 0; i < 8; ++i) {
      const std::uint32_t s = i == 0 ? layout.num_slots - 1 : probes.take<std::uint32_t>() % layout.num_slots;
      const std::uint32_t h = i == 0 ? heads - 1 : probes.take<std::uint32_t>() % heads;
      const std::uint32_t bs = layout.block_size;
      u128 want = 0;
      if (maker == 1) want = (u128{h} * slots + s) * hb;                                 // [heads][slots][dim]
      if (maker == 2) want = (u128{s} * heads + h) * hb;                                 // [blocks][bs][heads][dim]
      if (maker == 3) want = ((u128{s / bs} * heads + h) * bs + s % bs) * hb;            // [blocks][heads][bs][dim]
      if (extent_start(layout, {s, h}) != want) fail("a constructor's strides do not address the tensor asked for");
    }
  }
  return 0;
}
