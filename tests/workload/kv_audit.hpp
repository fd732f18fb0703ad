// KvAudit: the workload's "nothing lost" check. After a decode step it compares, row by row, the
// K and V the engine actually attended to (T0 rows in the engine's own cache, T1/T2 rows as
// libkvtier staged them for each layer) with a full mirror of every row the engine wrote:
//
//   T0, T1  bit-identical (memcmp of every KV head of every layer);
//   T2      every element within the int8 error bound (kv_audit.cpp derives it);
//   T3      absent from T0 and from every staged layer;
//   live    every position the plans left in T0/T1/T2 is found in T0 or staged, else lost.
//
// The tier of each position is what the applied plans say (ToyEngine tracks it); the audit never
// asks the daemon. A "row" is one token of one layer (the pool's row), all KV heads, K and V.
//
// Why a mirror and not the shadow model's cache: once a T2 row (lossy) or a T3 eviction has
// changed one attention output, every later token's hidden state, hence its K/V in layers >= 1,
// differs from the full-cache model's. Those rows are still the right ones: tiering must keep
// what the engine wrote, not what an untiered engine would have written. So the mirror copies each
// token's rows out of the engine's cache right after the step that wrote them (all T0 then), and
// the shadow model only measures how far the outputs drift (ToyEngine::compare).
//
// A T2 -> T0 restore puts dequantized values in the engine's cache: they are checked against the
// bound once, then become the mirrored row (see restored_from_t2).
//
// Thread-safety: none; one engine thread. KeyRanges is shared by the engines of one client.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "kvtier/kvtier.h"
#include "kvtier/toy/toy_model.hpp"

namespace kvtier::workload {

struct AuditStats {
  std::uint64_t steps = 0;           // audited steps
  std::uint64_t rows = 0;            // (position, layer) rows checked
  std::uint64_t exact_mismatch = 0;  // T0/T1 rows not bit-identical to the mirror
  std::uint64_t t2_rows = 0;
  std::uint64_t t2_bound_violations = 0;  // T2 rows with an element beyond the int8 bound
  std::uint64_t tier_mismatch = 0;   // a row where the plans say it is not (T3 still live, ...)
  double t2_max_abs_err = 0.0;
  std::set<std::uint32_t> lost;      // live positions found neither in T0 nor staged

  std::uint64_t violations() const {
    return exact_mismatch + t2_bound_violations + tier_mismatch + lost.size();
  }
};

// Per key channel (layer, KV head, dim): the range over every key any sequence of this client
// ever wrote. The int8 pool is per client and a block may hold rows of several sequences and
// rows that have since left T2, so only this client-wide, all-time range is sure to contain the
// range of whatever block a T2 key was quantized in.
class KeyRanges {
 public:
  KeyRanges(std::uint32_t layers, std::uint32_t kv_heads, std::uint32_t head_dim);
  // Widens the ranges by the keys of `position` in `model`'s cache (must be in its T0).
  // Call for every token of every sequence before any plan can move it.
  void widen(const toy::ToyModel& model, std::uint32_t position);
  float lo(std::size_t channel) const { return lo_[channel]; }
  float hi(std::size_t channel) const { return hi_[channel]; }

 private:
  std::uint32_t layers_, kv_heads_, head_dim_;
  std::vector<float> lo_, hi_;  // [layer][head][dim]
};

class KvAudit {
 public:
  KvAudit(const toy::ToyConfig& config, const KeyRanges& key_ranges);

  // Mirrors the rows of `position`, just written into `engine`'s cache (in its T0); positions
  // are recorded in order 0, 1, ...
  void record(const toy::ToyModel& engine, std::uint32_t position);
  // After a T2 -> T0 move was executed: checks the dequantized rows now in the engine's cache
  // against the int8 bound (as T2 rows), then mirrors them, since from now on they are the
  // token's KV and must stay exact (a token is quantized at most once per stay in T2).
  void restored_from_t2(const toy::ToyModel& engine, std::uint32_t position);

  // Starts capturing the staged rows of the coming step (stage() calls capture() per layer).
  void begin_step();
  bool capturing() const { return capturing_; }
  // Copies one layer's staged rows (the view dies with the next stage call).
  void capture(std::uint32_t layer, const toy::StagedRows& rows);
  // Checks every recorded position p < tiers.size() in every layer; tiers[p] is p's tier by the
  // plans; `engine` is the tiered model right after the step whose rows were captured.
  void check(const toy::ToyModel& engine, std::span<const std::uint8_t> tiers);

  const AuditStats& stats() const { return stats_; }
  // The first few violations, for stderr.
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  struct LayerCapture {
    std::vector<std::uint32_t> positions;
    std::vector<float> k, v;  // [rows, kv_heads, head_dim]
  };
  void note(std::string message);
  // Compares one T2 row (all heads, K then V) with the mirror; false on a violation.
  bool within_int8_bound(std::uint32_t layer, const float* k, const float* v, const float* mirror_k,
                         const float* mirror_v);
  // The mirrored K (or V) of `position` in `layer`: [kv_heads, head_dim].
  const float* mirror(bool key, std::uint32_t position, std::uint32_t layer) const;

  toy::ToyConfig config_;
  const KeyRanges& key_ranges_;
  bool capturing_ = false;
  std::size_t row_floats_;  // kv_heads * head_dim
  std::vector<LayerCapture> layers_;
  std::vector<float> mirror_;  // [position][layer][K, V][kv_heads][head_dim]
  std::vector<std::int32_t> staged_index_;  // per position: row in the layer capture, or -1
  AuditStats stats_;
  std::vector<std::string> notes_;
};

}  // namespace kvtier::workload
