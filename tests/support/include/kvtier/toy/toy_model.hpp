// ToyModel: a tiny decoder-only transformer decode step in plain float math, the test oracle
// for tiered attention. Weights are deterministic random values from a seed; the engine's KV
// cache (T0) is its own f32 tensors in HF layout [kv_heads, max_slots, head_dim] per layer,
// described by a kernels::KvLayout so the real executors copy rows in and out of it.
//
// Per layer: x = rmsnorm(h); q,k,v = W x; RoPE (theta 10000) on q and k at the token's TRUE
// absolute position; the new k,v go to the token's HBM slot; GQA softmax attention over the
// live keys; h += Wo * attention. The output is the final h.
//
// Live keys per layer are (a) the T0 tokens (the model's position -> HBM slot map) and (b) rows
// a StagingSource hands over for that layer (T1). Evicted (T3) tokens are simply absent. Key
// order, hence float summation order: kPositionOrder staging (or no staging) walks keys by
// ascending absolute position wherever they live, so a tiered cache gives bit-identical results
// to a full one; kCompact walks T0 first, then the staged rows as given (equal within tolerance).
//
// Thread-safety: none; one thread drives a model.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/kernels/staging.hpp"
#include "kvtier/base/error.hpp"

namespace kvtier::toy {

struct ToyConfig {
  std::uint32_t num_layers = 2;
  std::uint32_t num_q_heads = 4;
  std::uint32_t num_kv_heads = 2;  // num_q_heads % num_kv_heads == 0
  std::uint32_t head_dim = 8;      // even (RoPE rotates pairs)
  std::uint32_t max_slots = 64;    // HBM slots of the engine's cache
  std::uint32_t vocab_size = 32;
  double rope_theta = 10000.0;

  std::uint32_t model_dim() const noexcept { return num_q_heads * head_dim; }
};

// One layer's T1 rows, ready for attention. k and v are [rows, kv_heads, head_dim] f32 (the
// StagingBuffer layout); positions[i] is row i's absolute position. Not owned.
struct StagedRows {
  std::span<const std::uint32_t> positions;
  const float* k = nullptr;
  const float* v = nullptr;
  kernels::StagingOrder order = kernels::StagingOrder::kPositionOrder;
};

// Supplies a layer's staged T1 rows right before that layer's attention.
class StagingSource {
 public:
  virtual ~StagingSource() = default;
  // Called for layers 0, 1, ... in order during one step; the view stays valid until the next
  // call.
  virtual Result<StagedRows> stage(std::uint32_t layer) = 0;
};

struct StepOutput {
  std::vector<float> hidden;             // model_dim values
  std::vector<std::uint32_t> positions;  // every position attended this step, ascending
  // Per position: the softmax probability it received, mean over query heads, mean over layers.
  std::vector<float> scores;
};

class ToyModel {
 public:
  // Asserts a valid config (see ToyConfig comments; all sizes non-zero).
  ToyModel(const ToyConfig& config, std::uint64_t seed);
  ToyModel(const ToyModel&) = delete;
  ToyModel& operator=(const ToyModel&) = delete;

  const ToyConfig& config() const noexcept { return config_; }
  // The engine cache as kernels see it (f32, HF layout, num_slots = max_slots).
  const kernels::KvLayout& layout() const noexcept { return layout_; }

  std::vector<float> embed(std::uint32_t token) const;

  // Runs one token at `position` (which must not be live in T0 or staged) through all layers;
  // its K/V take a free HBM slot. kLimitExceeded with no free slot; kInvalidArgument for a bad
  // input size, a position already live, or staged rows that repeat a position, lie in the
  // future or (kPositionOrder) are not ascending.
  Result<StepOutput> decode_step(std::span<const float> input, std::uint32_t position,
                                 StagingSource* staging = nullptr);
  Result<StepOutput> decode_token(std::uint32_t token, std::uint32_t position,
                                  StagingSource* staging = nullptr);
  // decode_token for tokens[i] at first_position + i, all T0; returns the last step's output.
  Result<StepOutput> prefill(std::span<const std::uint32_t> tokens,
                             std::uint32_t first_position = 0);

  // T0 residency: the engine's position -> HBM slot map.
  std::optional<std::uint32_t> slot_of(std::uint32_t position) const;
  std::vector<std::uint32_t> resident_positions() const;  // ascending
  std::size_t free_slot_count() const noexcept { return free_slots_.size(); }
  // Drops a position from T0 (after its rows were offloaded) and returns its freed slot.
  Result<std::uint32_t> release(std::uint32_t position);
  // Reserves the lowest free slot for `position` (before its rows are restored into it).
  Result<std::uint32_t> admit(std::uint32_t position);

 private:
  struct Key;
  struct LayerWeights {
    std::vector<float> wq, wk, wv, wo;
  };

  Result<std::vector<Key>> gather_keys(std::uint32_t layer, std::uint32_t position,
                                       StagingSource* staging);
  void attend(std::span<const Key> keys, std::span<const float> q, std::span<float> out,
              std::map<std::uint32_t, float>& scores) const;
  void rope(std::span<float> heads, std::uint32_t position) const;
  float* k_at(std::uint32_t layer, std::uint32_t slot, std::uint32_t head) noexcept;
  float* v_at(std::uint32_t layer, std::uint32_t slot, std::uint32_t head) noexcept;

  ToyConfig config_;
  std::vector<float> embedding_;
  std::vector<LayerWeights> layers_;
  std::vector<std::vector<float>> k_cache_;  // per layer [kv_heads, max_slots, head_dim]
  std::vector<std::vector<float>> v_cache_;
  kernels::KvLayout layout_;
  std::map<std::uint32_t, std::uint32_t> slots_;  // position -> HBM slot
  std::set<std::uint32_t> free_slots_;
};

}  // namespace kvtier::toy
