// Fuzz target: the daemon's hand-off checks (daemon/src/handoff_checks.hpp): the exported cache
// description, the T0 list as sent and against the daemon's tiers, the adopter's geometry and
// its room.
//
// Input (fuzz_input.hpp), in sections:
//   geometry  u8 layers-1 (% 16), u8 heads-1 (% 16), u16 head_dim-1 (% 512), u8 wire dtype (% 4;
//             3 is unknown), u16 pool slots-1
//   cache     u16 kind, u64 bytes, u8 ipc handle bytes, u8 offset-count delta (% 3 - 1 from the
//             layer count), u64 K and V offset per entry, u32 num_slots, u32 block_size,
//             u64 token_stride, head_stride, block_stride, then 4 x (u32 slot, u32 head) probes
//   t0 wire   u8 count (% 32), u8 extra slots (% 2), (u32 position, u32 slot) per entry
//   tiers     u8 prompt (% 64), u8 sink (% 8), u8 window (% 16), u8 hbm share, u8 evict share,
//             u8 rounds (% 3), per round u8 new tokens (% 64) and one u8 score per token
//   t0 list   u8 mode (% 4: the T0 set, one dropped, one added, the wire list), u32 index/position
//   adopter   u8 mask of geometry fields to differ
//   room      u32 live tokens, u32 T1 rows, u32 T2 blocks, u8 row-bytes mode, u8 group mode,
//             u32 plan records, u32 free rows, u8 has int8, u32 group, u32 free blocks
//
// Beyond "no crash, no sanitizer report": an accepted cache puts every probed (slot, head) of
// every layer's K and V inside the buffer; an accepted wire T0 list ascends with slots in range;
// check_t0_matches accepts exactly the T0 set; the geometry and room checks accept exactly when
// their documented conditions hold.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <vector>

#include <capnp/message.h>

#include "fuzz_input.hpp"
#include "handoff_checks.hpp"
#include "kvtier/protocol/framing.hpp"
#include "kvtier/shm/records.hpp"
#include "request_checks.hpp"

namespace {

using kvtier::fuzz::FuzzInput;
namespace daemon = kvtier::daemon;
namespace wire = kvtier::wire;
using u128 = unsigned __int128;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "handoff_fuzz: property violated: %s\n", what);
  std::abort();
}

void check_cache_section(FuzzInput& in, const kvtier::shm::PoolGeometry& geometry, kvtier::kernels::KvDtype dtype,
                         std::uint32_t& num_slots) {
  capnp::MallocMessageBuilder message;
  auto cache = message.initRoot<wire::ExportedCache>();
  cache.setKind(static_cast<wire::BufferKind>(in.take<std::uint16_t>()));
  cache.setBytes(in.take<std::uint64_t>());
  cache.initIpcHandle(in.take<std::uint8_t>());
  const int delta = in.below<std::uint8_t>(3) - 1;
  const auto entries = static_cast<unsigned>(static_cast<int>(geometry.num_layers) + delta);
  auto k = cache.initKOffsets(entries), v = cache.initVOffsets(entries);
  for (unsigned i = 0; i < entries; ++i) {
    k.set(i, in.take<std::uint64_t>());
    v.set(i, in.take<std::uint64_t>());
  }
  cache.setNumSlots(in.take<std::uint32_t>());
  cache.setBlockSize(in.take<std::uint32_t>());
  cache.setTokenStride(in.take<std::uint64_t>());
  cache.setHeadStride(in.take<std::uint64_t>());
  cache.setBlockStride(in.take<std::uint64_t>());
  num_slots = cache.getNumSlots();
  const auto reader = cache.asReader();
  auto ok = kvtier::protocol::capture_protocol_errors(
      [&] { return daemon::check_exported_cache(reader, geometry, dtype); });
  std::vector<std::pair<std::uint32_t, std::uint32_t>> probes;
  for (int i = 0; i < 4; ++i) probes.emplace_back(in.take<std::uint32_t>(), in.take<std::uint32_t>());
  if (!ok) return;
  // Accepted: every (slot, head) of every layer lies inside the buffer.
  const std::uint32_t slots = reader.getNumSlots(), block = reader.getBlockSize(), heads = geometry.num_kv_heads;
  const u128 head_bytes = u128{geometry.head_dim} * kvtier::kernels::dtype_bytes(dtype);
  probes.emplace_back(0, 0);
  probes.emplace_back(slots - 1, heads - 1);
  if (slots > block) probes.emplace_back((slots - 1) / block * block - 1, heads - 1);
  for (auto [slot, head] : probes) {
    slot %= slots;
    head %= heads;
    const u128 offset = u128{slot / block} * reader.getBlockStride() + u128{slot % block} * reader.getTokenStride() +
                        u128{head} * reader.getHeadStride();
    for (unsigned l = 0; l < geometry.num_layers; ++l) {
      if (u128{reader.getKOffsets()[l]} + offset + head_bytes > reader.getBytes() ||
          u128{reader.getVOffsets()[l]} + offset + head_bytes > reader.getBytes()) {
        fail("an accepted cache has a (slot, head) beyond its buffer");
      }
    }
  }
}

std::vector<std::pair<std::uint32_t, std::uint32_t>> wire_t0_section(FuzzInput& in, std::uint32_t num_slots) {
  const unsigned count = in.below<std::uint8_t>(32);
  const unsigned extra = in.below<std::uint8_t>(2);
  capnp::MallocMessageBuilder message;
  auto request = message.initRoot<wire::ExportSequence>();
  auto positions = request.initT0Positions(count);
  auto slots = request.initT0Slots(count + extra);
  for (unsigned i = 0; i < count + extra; ++i) {
    const auto position = in.take<std::uint32_t>(), slot = in.take<std::uint32_t>();
    if (i < count) positions.set(i, position);
    slots.set(i, slot);
  }
  const auto reader = request.asReader();
  auto t0 = daemon::t0_list_from_wire(reader.getT0Positions(), reader.getT0Slots(), num_slots);
  if (!t0) return {};
  if (extra != 0) fail("t0_list_from_wire accepted lists of different lengths");
  for (std::size_t i = 0; i < t0->size(); ++i) {
    if ((i > 0 && (*t0)[i].first <= (*t0)[i - 1].first) || (*t0)[i].second >= num_slots) {
      fail("t0_list_from_wire accepted a list that does not ascend or has a slot out of range");
    }
  }
  return *t0;
}

std::optional<kvtier::tier::SequenceTiers> tiers_section(FuzzInput& in) {
  kvtier::tier::TierParams params;
  const std::uint32_t prompt = in.below<std::uint8_t>(64);
  params.sink_tokens = in.below<std::uint8_t>(8);
  params.window_tokens = in.below<std::uint8_t>(16);
  params.hbm_ratio = in.take<std::uint8_t>() / 255.0;
  params.evict_ratio = in.take<std::uint8_t>() / 255.0;
  params.interval = 1;
  auto tiers = kvtier::tier::SequenceTiers::create(prompt, params, 1024);
  if (!tiers) fail("SequenceTiers::create refused valid parameters");
  const unsigned rounds = in.below<std::uint8_t>(3);
  for (unsigned r = 0; r < rounds; ++r) {
    const unsigned added = in.below<std::uint8_t>(64);
    std::vector<float> scores(tiers->length() + added);
    for (float& s : scores) s = static_cast<float>(in.take<std::uint8_t>()) / 16.0f;
    if (!tiers->add_scores(0, scores)) fail("add_scores refused finite scores");
    tiers->end_step();
    if (tiers->due()) {
      tiers->decide();
      tiers->commit();
    }
  }
  return std::move(*tiers);
}

void t0_match_section(FuzzInput& in, const kvtier::tier::SequenceTiers& tiers,
                      const std::vector<std::pair<std::uint32_t, std::uint32_t>>& wire_list) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> t0;
  for (std::uint32_t p = 0; p < tiers.length(); ++p) {
    if (tiers.tier_of(p) == kvtier::tier::Tier::kT0) t0.emplace_back(p, p);
  }
  const std::set<std::uint32_t> truth = [&] {
    std::set<std::uint32_t> s;
    for (auto [p, slot] : t0) s.insert(p);
    return s;
  }();
  const unsigned mode = in.below<std::uint8_t>(4);
  const auto value = in.take<std::uint32_t>();
  if (mode == 1 && !t0.empty()) t0.erase(t0.begin() + value % t0.size());
  if (mode == 2) {
    std::set<std::uint32_t> s = truth;
    s.insert(value % (tiers.length() + 8));
    t0.clear();
    for (std::uint32_t p : s) t0.emplace_back(p, p);
  }
  if (mode == 3) t0 = wire_list;
  std::set<std::uint32_t> listed;
  for (auto [p, slot] : t0) listed.insert(p);
  const bool accepted = daemon::check_t0_matches(tiers, t0).has_value();
  if (accepted != (listed == truth && listed.size() == t0.size())) {
    fail("check_t0_matches disagrees with the T0 set");
  }
}

void adopter_section(FuzzInput& in, const kvtier::shm::PoolGeometry& geometry, wire::KvDtype dtype) {
  const auto mask = in.take<std::uint8_t>();
  kvtier::daemon::ExportRegistry::Entry entry;
  entry.num_layers = geometry.num_layers + ((mask & 1) != 0 ? 1 : 0);
  entry.num_kv_heads = geometry.num_kv_heads + ((mask & 2) != 0 ? 1 : 0);
  entry.head_dim = geometry.head_dim + ((mask & 4) != 0 ? 1 : 0);
  entry.dtype = (mask & 8) != 0 ? static_cast<wire::KvDtype>(static_cast<std::uint16_t>(dtype) + 1) : dtype;
  const bool accepted = daemon::check_adopter_geometry(geometry, dtype, entry).has_value();
  if (accepted != ((mask & 15) == 0)) fail("check_adopter_geometry disagrees with the geometry comparison");
}

void room_section(FuzzInput& in, const kvtier::shm::PoolGeometry& geometry) {
  daemon::HandoffNeeds needs;
  needs.live_tokens = in.take<std::uint32_t>();
  needs.t1_rows = in.take<std::uint32_t>();
  needs.t2_blocks = in.take<std::uint32_t>() % 8;
  needs.row_bytes = in.flag() ? geometry.row_bytes() + 1 : geometry.row_bytes();
  const bool same_group = !in.flag();
  daemon::AdopterRoom room;
  room.row_bytes = geometry.row_bytes();
  room.plan_ring_records = in.take<std::uint32_t>();
  room.free_rows = in.take<std::uint32_t>();
  if (in.flag()) room.int8_group = in.take<std::uint32_t>();
  room.free_int8_blocks = in.take<std::uint32_t>();
  needs.int8_group = room.int8_group.value_or(32) + (same_group ? 0 : 1);
  const std::uint64_t records = (std::uint64_t{needs.live_tokens} + kvtier::shm::kMovesPerRecord - 1) /
                                kvtier::shm::kMovesPerRecord;
  const bool fits = needs.row_bytes == room.row_bytes && records <= room.plan_ring_records &&
                    needs.t1_rows <= room.free_rows &&
                    (needs.t2_blocks == 0 || (room.int8_group && needs.int8_group == *room.int8_group &&
                                              needs.t2_blocks <= room.free_int8_blocks));
  if (daemon::check_adopt_room(needs, room).has_value() != fits) fail("check_adopt_room disagrees with the room");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  const std::uint32_t layers = 1u + in.below<std::uint8_t>(16), heads = 1u + in.below<std::uint8_t>(16);
  const std::uint32_t head_dim = 1u + in.below<std::uint16_t>(512);
  const auto wire_dtype = static_cast<wire::KvDtype>(in.below<std::uint8_t>(4));
  const std::uint32_t pool_slots = 1u + in.take<std::uint16_t>();
  const auto dtype = daemon::kernel_dtype(wire_dtype);
  if (!dtype) return 0;  // RegisterModel refuses it: no hand-off without a registered model
  auto geometry = kvtier::shm::make_pool_geometry(layers, heads, head_dim,
                                                  static_cast<std::uint32_t>(kvtier::kernels::dtype_bytes(*dtype)),
                                                  pool_slots);
  if (!geometry) return 0;

  std::uint32_t num_slots = 0;
  check_cache_section(in, *geometry, *dtype, num_slots);
  const auto wire_list = wire_t0_section(in, num_slots);
  const auto tiers = tiers_section(in);
  t0_match_section(in, *tiers, wire_list);
  adopter_section(in, *geometry, wire_dtype);
  room_section(in, *geometry);
  return 0;
}
