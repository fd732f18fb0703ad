// ToyEngine: one sequence of the workload: a real (toy) transformer whose KV cache is tiered
// through libkvtier, optionally shadowed by an untiered copy of the same model to check that
// attention over the tiered cache equals (or, with T2/T3, how far it is from) attention over the
// full cache, and audited (KvAudit) so that every row attended is the row the engine wrote:
// exactly for T0/T1, within the int8 bound for T2.
//
// Backend: with KVTIER_BACKEND_CPU the library copies rows in and out of the model's own host
// cache; with KVTIER_BACKEND_CUDA the cache it sees and the staging buffer are device memory
// (DeviceCache), mirrored to and from the model's host cache around each step.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kv_audit.hpp"
#include "kvtier/kvtier.hpp"
#include "kvtier/toy/toy_model.hpp"

namespace kvtier::workload {

class DeviceCache;

struct EngineStats {
  std::uint64_t plans = 0;
  std::uint64_t plans_failed = 0;
  std::uint64_t rows_offloaded = 0;
  std::uint64_t rows_restored = 0;     // T1 -> T0
  std::uint64_t rows_to_t2 = 0;        // any tier -> T2 (the daemon quantized the row)
  std::uint64_t rows_restored_t2 = 0;  // T2 -> T0 (dequantized into the engine cache)
  std::uint64_t t3_tokens = 0;         // moves into T3: positions the plans evicted
  std::uint64_t rows_t2_evicted = 0;   // T2 -> T3 (of t3_tokens)
  std::uint64_t plan_tier_mismatch = 0;  // a move whose from-tier is not the tracked tier
  std::uint64_t steps_compared = 0;
  std::uint64_t steps_identical = 0;
  double max_abs_diff = 0.0;
  std::uint32_t peak_t0 = 0;  // most tokens held in the engine's cache at once
};

class ToyEngine {
 public:
  // key_ranges: the client-wide key ranges the audit's T2 bound uses (shared by the engines of
  // one client, outliving them); nullptr = no audit. audit_every: audit every Nth decode step.
  ToyEngine(Client& client, std::uint32_t sequence, const toy::ToyConfig& config, std::uint64_t seed,
            kvtier_staging_order order, bool shadow, KeyRanges* key_ranges, unsigned audit_every,
            kvtier_policy policy = KVTIER_POLICY_PAPER, kvtier_backend backend = KVTIER_BACKEND_CPU);
  ~ToyEngine();

  // Attaches the engine's cache (in device memory with KVTIER_BACKEND_CUDA) to the sequence and
  // runs the prompt (all T0). Engine-side failures are described on stderr.
  kvtier_status start(std::uint32_t prompt_length);
  // Executes one plan for this sequence and acknowledges it.
  kvtier_status apply(const kvtier_plan& plan);
  // Decodes the next token, pushes its scores and ends the step.
  kvtier_status step();

  std::uint32_t sequence() const { return sequence_; }
  const EngineStats& stats() const { return stats_; }
  // nullptr without an audit.
  const KvAudit* audit() const { return audit_.get(); }

 private:
  class Staging;
  std::uint32_t token_at(std::uint32_t position) const;
  void compare(const toy::StepOutput& tiered, const toy::StepOutput& full);
  // Sends the features the policy needs for a freshly decoded (T0) position.
  kvtier_status push_features(std::uint32_t position);
  // Tracks a freshly written (T0) position: its tier, the audit's mirror, the key ranges and,
  // with a device cache, its rows on the device.
  kvtier_status written(std::uint32_t position);
  const float* row(const std::vector<std::uintptr_t>& base, std::uint32_t layer, std::uint32_t slot,
                   std::uint32_t head) const;

  Client& client_;
  std::uint32_t sequence_;
  kvtier_staging_order order_;
  kvtier_policy policy_;
  std::unique_ptr<toy::ToyModel> model_;
  std::unique_ptr<toy::ToyModel> shadow_;  // full cache, same weights and tokens
  kvtier_backend backend_;
  std::unique_ptr<DeviceCache> device_;  // KVTIER_BACKEND_CUDA only, from start()
  std::unique_ptr<Staging> staging_;
  KeyRanges* key_ranges_;
  std::unique_ptr<KvAudit> audit_;
  unsigned audit_every_;
  std::vector<std::uint8_t> tiers_;  // per decoded position: its tier by the applied plans
  std::uint64_t seed_;
  std::uint32_t next_position_ = 0;
  std::uint32_t step_ = 0;
  std::vector<float> scores_;
  EngineStats stats_;
};

}  // namespace kvtier::workload
