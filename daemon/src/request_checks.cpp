#include "request_checks.hpp"

#include <algorithm>
#include <string>

#include "kvtier/protocol/defaults.hpp"
#include "tier_params.hpp"

namespace kvtier::daemon {

std::optional<kernels::KvDtype> kernel_dtype(wire::KvDtype dtype) {
  switch (dtype) {
    case wire::KvDtype::F16: return kernels::KvDtype::kF16;
    case wire::KvDtype::BF16: return kernels::KvDtype::kBf16;
    case wire::KvDtype::F32: return kernels::KvDtype::kF32;
  }
  return std::nullopt;  // a value this build does not know
}

Result<PoolRequest> pool_request_from_wire(wire::RegisterModel::Reader request, const config::PoolsSection& pools) {
  PoolRequest pool;
  const auto dtype = kernel_dtype(request.getDtype());
  if (!dtype) return make_error(Errc::kInvalidArgument, "unknown KV dtype");
  pool.dtype = *dtype;
  auto geometry = shm::make_pool_geometry(request.getNumLayers(), request.getNumKvHeads(), request.getHeadDim(),
                                          static_cast<std::uint32_t>(kernels::dtype_bytes(pool.dtype)),
                                          request.getPoolTokens());
  if (!geometry) return make_error(Errc::kInvalidArgument, "bad KV geometry: " + geometry.error().message);
  pool.ddr = *geometry;
  if (const std::uint32_t tokens = request.getInt8PoolTokens(); tokens != 0) {
    const std::uint32_t group = pools.int8_group_tokens;
    auto int8 = shm::make_int8_pool_geometry(geometry->num_layers, geometry->num_kv_heads, geometry->head_dim, group,
                                             tokens / group + (tokens % group != 0 ? 1 : 0));
    if (!int8) return make_error(Errc::kInvalidArgument, "bad int8 pool: " + int8.error().message);
    pool.int8 = *int8;
  }
  pool.weight = std::clamp<std::uint32_t>(request.getWeight(), 1, pools.max_client_weight);
  return pool;
}

Result<OpenRequest> open_request_from_wire(wire::OpenSequence::Reader request, const config::DaemonConfig& config,
                                           bool has_int8_pool, std::uint64_t sequence_salt) {
  return open_request_from_wire(request.getPromptLength(), request.getTiering(), config, has_int8_pool, sequence_salt);
}

Result<OpenRequest> open_request_from_wire(std::uint32_t prompt_length, wire::TierParams::Reader tiering,
                                           const config::DaemonConfig& config, bool has_int8_pool,
                                           std::uint64_t sequence_salt) {
  const auto& limits = config.limits;
  OpenRequest open;
  open.prompt_length = prompt_length;
  if (open.prompt_length >= limits.max_tokens_per_sequence) {
    return make_error(Errc::kInvalidArgument, "prompt length " + std::to_string(open.prompt_length) +
                                                  " exceeds limits.max_tokens_per_sequence=" +
                                                  std::to_string(limits.max_tokens_per_sequence));
  }
  auto params = tier_params_from_wire(tiering, config.tiering, sequence_salt);
  if (!params) return tl::unexpected(params.error());
  open.params = *params;
  if (!has_int8_pool && tier::int8_enabled(open.params)) {
    if (!tiering.getUseDefaults()) {
      return make_error(Errc::kBadState, "sequence asks for the int8 tier (int8Ratio " +
                                             std::to_string(open.params.int8_ratio) + ", int8Tokens " +
                                             std::to_string(open.params.int8_tokens) +
                                             ") but the client registered no int8 pool (int8PoolTokens 0)");
    }
    open.params.int8_ratio = 0.0;  // the node default asks for T2; a client without an int8 pool has none
  }
  const std::uint32_t digest_dim = tiering.getKeyDigestDim();
  if (digest_dim > protocol::kMaxKeyDigestDim) {
    return make_error(Errc::kInvalidArgument, "keyDigestDim " + std::to_string(digest_dim) + " exceeds " +
                                                  std::to_string(protocol::kMaxKeyDigestDim));
  }
  open.digest_dim = digest_dim == 0 ? protocol::kDefaultKeyDigestDim : digest_dim;
  return open;
}

}  // namespace kvtier::daemon
