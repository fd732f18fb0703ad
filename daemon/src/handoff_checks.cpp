#include "handoff_checks.hpp"

#include <algorithm>
#include <string>

#include "kvtier/shm/records.hpp"

namespace kvtier::daemon {
namespace {

constexpr std::size_t kIpcHandleBytes = 64;

}  // namespace

Status check_exported_cache(wire::ExportedCache::Reader cache, const shm::PoolGeometry& geometry,
                            kernels::KvDtype dtype) {
  if (static_cast<std::uint16_t>(cache.getKind()) > static_cast<std::uint16_t>(wire::BufferKind::CUDA_VMM_FD)) {
    return make_error(Errc::kInvalidArgument, "cache.kind " + std::to_string(static_cast<int>(cache.getKind())) +
                                                  " is not a buffer kind");
  }
  const bool ipc = cache.getKind() == wire::BufferKind::CUDA_IPC;
  if (cache.getIpcHandle().size() != (ipc ? kIpcHandleBytes : 0)) {
    return make_error(Errc::kInvalidArgument, "cache.ipcHandle has " + std::to_string(cache.getIpcHandle().size()) +
                                                  " bytes; a " + (ipc ? "cudaIpc buffer needs 64" : "buffer of this kind none"));
  }
  if (cache.getKOffsets().size() != geometry.num_layers || cache.getVOffsets().size() != geometry.num_layers) {
    return make_error(Errc::kInvalidArgument, "cache.kOffsets/vOffsets list " + std::to_string(cache.getKOffsets().size()) +
                                                  "/" + std::to_string(cache.getVOffsets().size()) +
                                                  " layers; the model has " + std::to_string(geometry.num_layers));
  }
  // Checked as a KvLayout over a synthetic base: the offsets become non-null, aligned pointers.
  constexpr std::uint64_t kBase = std::uint64_t{1} << 12, kMaxBytes = std::uint64_t{1} << 48;
  const std::uint64_t bytes = cache.getBytes();
  if (bytes == 0 || bytes > kMaxBytes) {
    return make_error(Errc::kInvalidArgument, "cache.bytes " + std::to_string(bytes) + " is not in [1, 2^48]");
  }
  kernels::KvLayout layout;
  layout.num_layers = geometry.num_layers;
  layout.num_kv_heads = geometry.num_kv_heads;
  layout.head_dim = geometry.head_dim;
  layout.dtype = dtype;
  layout.num_slots = cache.getNumSlots();
  layout.block_size = cache.getBlockSize();
  layout.token_stride = cache.getTokenStride();
  layout.head_stride = cache.getHeadStride();
  layout.block_stride = cache.getBlockStride();
  for (std::uint32_t l = 0; l < geometry.num_layers; ++l) {
    if (cache.getKOffsets()[l] >= bytes || cache.getVOffsets()[l] >= bytes) {
      return make_error(Errc::kInvalidArgument, "cache.kOffsets/vOffsets[" + std::to_string(l) + "] lies beyond the " +
                                                    std::to_string(bytes) + "-byte buffer");
    }
    layout.k_base.push_back(kBase + cache.getKOffsets()[l]);
    layout.v_base.push_back(kBase + cache.getVOffsets()[l]);
  }
  if (auto ok = kernels::validate(layout); !ok) {
    return make_error(Errc::kInvalidArgument, "cache: " + ok.error().message);
  }
  const std::uint64_t extent = kernels::layer_extent_bytes(layout);  // exact after validate
  for (std::uint32_t l = 0; l < geometry.num_layers; ++l) {
    const std::uint64_t start = std::max(cache.getKOffsets()[l], cache.getVOffsets()[l]);  // < bytes
    if (extent > bytes - start) {
      return make_error(Errc::kInvalidArgument, "cache: layer " + std::to_string(l) + " spans " +
                                                    std::to_string(extent) + " bytes from offset " +
                                                    std::to_string(start) + ", beyond the " + std::to_string(bytes) +
                                                    "-byte buffer");
    }
  }
  return {};
}

Result<T0List> t0_list_from_wire(capnp::List<std::uint32_t>::Reader positions,
                                 capnp::List<std::uint32_t>::Reader slots, std::uint32_t num_slots) {
  if (positions.size() != slots.size()) {
    return make_error(Errc::kInvalidArgument, "t0Positions lists " + std::to_string(positions.size()) +
                                                  " tokens, t0Slots " + std::to_string(slots.size()));
  }
  T0List t0;
  t0.reserve(positions.size());
  for (unsigned i = 0; i < positions.size(); ++i) {
    if (i > 0 && positions[i] <= positions[i - 1]) {
      return make_error(Errc::kInvalidArgument, "t0Positions must ascend: " + std::to_string(positions[i]) +
                                                    " follows " + std::to_string(positions[i - 1]));
    }
    if (slots[i] >= num_slots) {
      return make_error(Errc::kInvalidArgument, "t0Slots[" + std::to_string(i) + "] = " + std::to_string(slots[i]) +
                                                    " is beyond the cache's " + std::to_string(num_slots) + " slots");
    }
    t0.emplace_back(positions[i], slots[i]);
  }
  return t0;
}

Status check_t0_matches(const tier::SequenceTiers& tiers, std::span<const std::pair<std::uint32_t, std::uint32_t>> t0) {
  // The adopter must receive every T0 token, and only those: the list must be the tiers' T0 set.
  std::size_t next = 0;
  for (std::uint32_t position = 0; position < tiers.length(); ++position) {
    if (tiers.tier_of(position) != tier::Tier::kT0) continue;
    if (next >= t0.size() || t0[next].first != position) {
      return make_error(Errc::kInvalidArgument, "t0Positions: position " + std::to_string(position) +
                                                    " is in T0 but not listed (" + std::to_string(t0.size()) +
                                                    " listed, kvtierd has " +
                                                    std::to_string(tiers.count(tier::Tier::kT0)) + " in T0)");
    }
    ++next;
  }
  if (next != t0.size()) {
    return make_error(Errc::kInvalidArgument, "t0Positions: position " + std::to_string(t0[next].first) +
                                                  " is not in T0 (kvtierd has " +
                                                  std::to_string(tiers.count(tier::Tier::kT0)) + " in T0)");
  }
  return {};
}

Status check_adopter_geometry(const shm::PoolGeometry& mine, wire::KvDtype my_dtype,
                              const ExportRegistry::Entry& exported) {
  const auto differs = [](const char* field, std::uint64_t here, std::uint64_t there) {
    return make_error(Errc::kInvalidArgument, std::string("model geometry differs from the exporter's: ") + field + " " +
                                                  std::to_string(here) + " here, " + std::to_string(there) + " there");
  };
  if (mine.num_layers != exported.num_layers) return differs("numLayers", mine.num_layers, exported.num_layers);
  if (mine.num_kv_heads != exported.num_kv_heads) {
    return differs("numKvHeads", mine.num_kv_heads, exported.num_kv_heads);
  }
  if (mine.head_dim != exported.head_dim) return differs("headDim", mine.head_dim, exported.head_dim);
  if (my_dtype != exported.dtype) {
    return differs("dtype", static_cast<std::uint64_t>(my_dtype), static_cast<std::uint64_t>(exported.dtype));
  }
  return {};
}

Status check_adopt_room(const HandoffNeeds& needs, const AdopterRoom& room) {
  if (needs.row_bytes != room.row_bytes) {
    return make_error(Errc::kInvalidArgument, "the exporter's pool rows are " + std::to_string(needs.row_bytes) +
                                                  " bytes, this client's " + std::to_string(room.row_bytes));
  }
  const std::uint64_t records = (std::uint64_t{needs.live_tokens} + shm::kMovesPerRecord - 1) / shm::kMovesPerRecord;
  if (records > room.plan_ring_records) {
    return make_error(Errc::kLimitExceeded, "the sequence's " + std::to_string(needs.live_tokens) +
                                                " live tokens need " + std::to_string(records) +
                                                " plan records; this client's plan ring holds " +
                                                std::to_string(room.plan_ring_records) +
                                                " (limits.plan_ring_records)");
  }
  if (needs.t1_rows > room.free_rows) {
    return make_error(Errc::kLimitExceeded, "the sequence holds " + std::to_string(needs.t1_rows) +
                                                " T1 rows; this client's pool has " + std::to_string(room.free_rows) +
                                                " free");
  }
  if (needs.t2_blocks == 0) return {};
  if (!room.int8_group) {
    return make_error(Errc::kBadState, "the sequence holds T2 rows; this client registered no int8 pool (int8PoolTokens 0)");
  }
  if (needs.int8_group != *room.int8_group) {
    return make_error(Errc::kInvalidArgument, "the exporter's int8 blocks hold " + std::to_string(needs.int8_group) +
                                                  " tokens, this client's " + std::to_string(*room.int8_group));
  }
  if (needs.t2_blocks > room.free_int8_blocks) {
    return make_error(Errc::kLimitExceeded, "the sequence's T2 rows need " + std::to_string(needs.t2_blocks) +
                                                " int8 blocks; this client's int8 pool has " +
                                                std::to_string(room.free_int8_blocks) + " free");
  }
  return {};
}

}  // namespace kvtier::daemon
