// The engine side of kvtier-handoff-peer (handoff_peer_main.cpp): one sequence over a PeerCache,
// its plans executed (hbm slot = position) and acknowledged, synthetic scores pushed, and every
// row it holds or stages checked against the generated values (exactly, or within the int8 bound
// for tokens that have been in T2). Failures throw Failed with the process's exit code.
//
// Thread-safety: none; the process's one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "handoff_peer_cache.hpp"
#include "kvtier/kvtier.hpp"

namespace kvtier::workload {

inline constexpr std::uint8_t kUnseen = 0xFF;  // a position no plan has named (adopter) / not written
// Asymmetric min-max u8 codes over values in [-1, 1]: half a step of 2/255, plus float slack.
inline constexpr float kInt8Bound = 2.0f / 255.0f / 2.0f + 1e-6f;

// Thrown to end the process with `code` (1 failure, 3 daemon unreachable, 6 a check failed).
struct Failed {
  int code;
};

// Both describe the failure on stderr and throw Failed.
void check(const Client& client, const char* what, kvtier_status status);
void check(const Status& status, const char* what);

struct Engine {
  kvtier::Client& client;
  std::uint32_t sequence;
  PeerCache& cache;
  std::vector<std::uint8_t> tiers;  // by position
  // Times each position entered T2: its rows are exact only while 0; every stay in T2 adds at
  // most one int8 rounding (slightly more the second time: the range may exceed [-1, 1]).
  std::vector<std::uint8_t> quantized;
  unsigned plans = 0, peer_rows = 0, mismatches = 0, lost = 0;
  std::uint32_t digest_dim = 0;  // r_kv: floats per key digest, pushed with every new row; 0: none

  float bound(std::uint32_t position) const;

  // Executes (hbm slot = position) and acknowledges one plan; counts what the moves say.
  void apply(const kvtier_plan& plan);
  // Applies every plan arriving within `timeout` of the previous one; false when none came.
  bool drain(std::chrono::milliseconds timeout);
  // Key digests (digest_dim floats each: the K row of layer 0 across heads) for [first, first + count).
  void push_digests(std::uint32_t first, std::uint32_t count);
  // One decode step at `position`: the row (and its digest when digest_dim > 0), scores over [0, position] (sinks and the newest 16
  // high, the rest low and uneven, evicted 0), step_end.
  void decode(std::uint32_t position, std::uint32_t step);
  bool row_ok(const float* k, const float* v, std::uint32_t position, std::uint32_t layer, std::uint32_t head,
              float bound) const;
  void mismatch(const char* what, std::uint32_t position, std::uint32_t layer);
  // Every T0 row in the cache and every staged row (position order) against the generated values.
  void verify(kvtier_backend backend);
  unsigned count(std::uint8_t tier) const;
};

}  // namespace kvtier::workload
