#include "toy_engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>

#include "device_cache.hpp"

namespace kvtier::workload {
namespace {

// The engine's own failures (device copies, the model) have no client error to carry them.
kvtier_status engine_error(std::uint32_t sequence, const char* what, const Error& error) {
  std::fprintf(stderr, "kvtier-workload: sequence %u: %s: %s\n", sequence, what, error.message.c_str());
  return KVTIER_E_INTERNAL;
}

}  // namespace

// Hands the model each layer's host rows (T1 exact, T2 dequantized), staged by libkvtier from the
// pools (into device memory and back down with a device cache), and lets the audit copy what the
// model is given. Double buffered as an engine on a GPU would: layer l + 1 is prefetched
// (kvtier_stage_prefetch) before layer l is waited for (kvtier_stage_wait), into the other buffer.
class ToyEngine::Staging : public toy::StagingSource {
 public:
  Staging(Client& client, std::uint32_t sequence, std::uint32_t layers, kvtier_staging_order order, KvAudit* audit)
      : client_(client), sequence_(sequence), layers_(layers), order_(order), audit_(audit) {}

  void set_device(DeviceCache* device) { device_ = device; }

  Result<toy::StagedRows> stage(std::uint32_t layer) override {
    if (ahead_ != layer) {
      if (auto ok = prefetch(layer); !ok) return tl::unexpected(ok.error());
    }
    ahead_.reset();
    if (layer + 1 < layers_) {
      if (auto ok = prefetch(layer + 1); !ok) return tl::unexpected(ok.error());
      ahead_ = layer + 1;
    }
    kvtier_staged_layer staged{};
    if (device_ != nullptr) {
      if (auto ok = device_->finish(client_, sequence_, layer, buffer_[layer % 2], staged); !ok) {
        return tl::unexpected(ok.error());
      }
    } else if (client_.stage_wait(sequence_, layer, staged) != KVTIER_OK) {
      return make_error(Errc::kInternal, client_.last_error());
    }
    const toy::StagedRows view{std::span(staged.positions, staged.rows), static_cast<const float*>(staged.k),
                               static_cast<const float*>(staged.v),
                               order_ == KVTIER_STAGE_COMPACT ? kernels::StagingOrder::kCompact
                                                              : kernels::StagingOrder::kPositionOrder};
    if (audit_ != nullptr && audit_->capturing()) audit_->capture(layer, view);
    return view;
  }

 private:
  Status prefetch(std::uint32_t layer) {
    std::size_t rows = 0, bytes = 0;
    if (client_.t1_rows(sequence_, rows, bytes) != KVTIER_OK) return make_error(Errc::kInternal, client_.last_error());
    if (device_ != nullptr) return device_->prefetch(client_, sequence_, layer, order_, bytes);
    std::vector<float>& buffer = buffer_[layer % 2];
    buffer.resize(std::max<std::size_t>(bytes / sizeof(float), 1));
    if (client_.stage_prefetch(sequence_, layer, order_, std::as_writable_bytes(std::span(buffer))) != KVTIER_OK) {
      return make_error(Errc::kInternal, client_.last_error());
    }
    return {};
  }

  Client& client_;
  std::uint32_t sequence_;
  std::uint32_t layers_;
  kvtier_staging_order order_;
  KvAudit* audit_;
  DeviceCache* device_ = nullptr;
  std::optional<std::uint32_t> ahead_;  // the layer prefetched ahead of the one being staged
  std::vector<float> buffer_[2];        // host staging (or the device's staged rows, downloaded)
};

ToyEngine::ToyEngine(Client& client, std::uint32_t sequence, const toy::ToyConfig& config, std::uint64_t seed,
                     kvtier_staging_order order, bool shadow, KeyRanges* key_ranges, unsigned audit_every,
                     kvtier_policy policy, kvtier_backend backend)
    : client_(client),
      sequence_(sequence),
      order_(order),
      policy_(policy),
      model_(std::make_unique<toy::ToyModel>(config, seed)),
      shadow_(shadow ? std::make_unique<toy::ToyModel>(config, seed) : nullptr),
      backend_(backend),
      key_ranges_(key_ranges),
      audit_(key_ranges != nullptr && audit_every != 0 ? std::make_unique<KvAudit>(config, *key_ranges) : nullptr),
      audit_every_(audit_every),
      seed_(seed) {
  staging_ = std::make_unique<Staging>(client, sequence, config.num_layers, order, audit_.get());
}

ToyEngine::~ToyEngine() = default;

std::uint32_t ToyEngine::token_at(std::uint32_t position) const {
  // Deterministic pseudo-random input tokens (teacher forcing), the same for both models.
  std::uint64_t x = (seed_ + position) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return static_cast<std::uint32_t>(x % model_->config().vocab_size);
}

kvtier_status ToyEngine::start(std::uint32_t prompt_length) {
  const kernels::KvLayout& l = model_->layout();
  kvtier_kv_layout layout;
  kvtier_kv_layout_init(&layout);
  layout.num_layers = l.num_layers;
  layout.num_kv_heads = l.num_kv_heads;
  layout.head_dim = l.head_dim;
  layout.dtype = KVTIER_DTYPE_F32;
  layout.num_slots = l.num_slots;
  layout.block_size = l.block_size;
  layout.token_stride = l.token_stride;
  layout.head_stride = l.head_stride;
  layout.block_stride = l.block_stride;
  layout.k_base = l.k_base.data();
  layout.v_base = l.v_base.data();
  if (backend_ == KVTIER_BACKEND_CUDA) {
    auto device = DeviceCache::create(l);
    if (!device) return engine_error(sequence_, "device cache", device.error());
    device_ = std::move(*device);
    staging_->set_device(device_.get());
    layout = device_->layout();
  }
  if (const auto st = client_.attach_cache(sequence_, layout); st != KVTIER_OK) return st;
  // Prefill row by row; the daemon accumulates each row's probabilities, i.e. the prompt's
  // column sums, before the first decode step ends.
  for (std::uint32_t position = 0; position < prompt_length; ++position) {
    auto out = model_->decode_token(token_at(position), position);
    if (!out) return engine_error(sequence_, "prefill", out.error());
    if (shadow_ && !shadow_->decode_token(token_at(position), position)) return KVTIER_E_INTERNAL;
    if (const auto st = written(position); st != KVTIER_OK) return st;
    if (const auto st = client_.push_scores(sequence_, 0, 0, out->scores); st != KVTIER_OK) return st;
    if (const auto st = push_features(position); st != KVTIER_OK) return st;
  }
  next_position_ = prompt_length;
  stats_.peak_t0 = prompt_length;
  return KVTIER_OK;
}

kvtier_status ToyEngine::apply(const kvtier_plan& plan) {
  std::vector<std::uint32_t> hbm(plan.move_count, KVTIER_NO_SLOT);
  std::vector<std::uint32_t> admitted;
  bool ok = true;
  for (std::size_t i = 0; i < plan.move_count && ok; ++i) {
    const kvtier_plan_move& m = plan.moves[i];
    if (m.from_tier == KVTIER_T0) {
      const auto slot = model_->slot_of(m.position);
      ok = slot.has_value();
      hbm[i] = slot.value_or(KVTIER_NO_SLOT);
    } else if (m.to_tier == KVTIER_T0) {
      auto slot = model_->admit(m.position);
      ok = slot.has_value();
      if (ok) {
        hbm[i] = *slot;
        admitted.push_back(m.position);
      }
    }
  }
  if (ok && client_.execute_plan(plan, hbm) != KVTIER_OK) {
    std::fprintf(stderr, "kvtier-workload: sequence %u: plan %llu not applied: %s\n", sequence_,
                 static_cast<unsigned long long>(plan.epoch), client_.last_error().c_str());
    ok = false;
  }
  if (!ok) {
    // The daemon rolls the plan back; the placement stays as it was.
    for (const auto position : admitted) (void)model_->release(position);
    ++stats_.plans_failed;
    return client_.ack_plan(plan.epoch, false);
  }
  kvtier_status engine_failed = KVTIER_OK;  // the plan is applied either way: ack it first
  for (std::size_t i = 0; i < plan.move_count; ++i) {
    const kvtier_plan_move& m = plan.moves[i];
    if (m.from_tier == KVTIER_T0) (void)model_->release(m.position);
    stats_.rows_offloaded += (m.from_tier == KVTIER_T0 && m.to_tier == KVTIER_T1) ? 1 : 0;
    stats_.rows_restored += (m.from_tier == KVTIER_T1 && m.to_tier == KVTIER_T0) ? 1 : 0;
    stats_.rows_to_t2 += m.to_tier == KVTIER_T2 ? 1 : 0;
    stats_.rows_restored_t2 += (m.from_tier == KVTIER_T2 && m.to_tier == KVTIER_T0) ? 1 : 0;
    stats_.t3_tokens += m.to_tier == KVTIER_T3 ? 1 : 0;
    stats_.rows_t2_evicted += (m.from_tier == KVTIER_T2 && m.to_tier == KVTIER_T3) ? 1 : 0;
    // Track each position's tier for the audit; a move from where the token is not is a bug.
    if (m.position >= tiers_.size() || tiers_[m.position] != m.from_tier) {
      ++stats_.plan_tier_mismatch;
      continue;
    }
    tiers_[m.position] = m.to_tier;
    if (audit_ && m.from_tier == KVTIER_T2 && m.to_tier == KVTIER_T0) {
      // With a device cache the dequantized row is on the device only: bring it down first.
      if (device_) {
        if (auto down = device_->download_slot(hbm[i]); !down) {
          engine_failed = engine_error(sequence_, "device cache download", down.error());
          continue;
        }
      }
      audit_->restored_from_t2(*model_, m.position);
      key_ranges_->widen(*model_, m.position);
    }
  }
  ++stats_.plans;
  const kvtier_status acked = client_.ack_plan(plan.epoch, true);
  return engine_failed != KVTIER_OK ? engine_failed : acked;
}

kvtier_status ToyEngine::step() {
  const std::uint32_t position = next_position_++;
  const std::uint32_t token = token_at(position);
  const bool audit = audit_ != nullptr && step_ % audit_every_ == 0;
  if (audit) audit_->begin_step();
  // Attention reads the host cache: bring down what the library left on the device (restores).
  if (device_) {
    if (auto ok = device_->download_all(); !ok) return engine_error(sequence_, "device cache download", ok.error());
  }
  auto out = model_->decode_token(token, position, staging_.get());
  if (!out) return engine_error(sequence_, "decode", out.error());
  if (const auto st = written(position); st != KVTIER_OK) return st;
  if (audit) audit_->check(*model_, tiers_);
  if (shadow_) {
    auto full = shadow_->decode_token(token, position);
    if (!full) return KVTIER_E_INTERNAL;
    compare(*out, *full);
  }
  const std::size_t resident = model_->config().max_slots - model_->free_slot_count();
  stats_.peak_t0 = std::max(stats_.peak_t0, static_cast<std::uint32_t>(resident));
  // Scores over [0, position]; evicted positions (absent from the step) contribute 0.
  scores_.assign(position + 1, 0.0f);
  for (std::size_t i = 0; i < out->positions.size(); ++i) scores_[out->positions[i]] = out->scores[i];
  if (const auto st = client_.push_scores(sequence_, step_, 0, scores_); st != KVTIER_OK) return st;
  if (const auto st = push_features(position); st != KVTIER_OK) return st;
  return client_.step_end(sequence_, step_++);
}

kvtier_status ToyEngine::written(std::uint32_t position) {
  tiers_.push_back(KVTIER_T0);
  if (device_) {
    // Offloads read the device cache: the new rows must be there before the next plan.
    if (auto ok = device_->upload_slot(*model_->slot_of(position)); !ok) {
      return engine_error(sequence_, "device cache upload", ok.error());
    }
  }
  if (!audit_) return KVTIER_OK;
  audit_->record(*model_, position);
  key_ranges_->widen(*model_, position);
  return KVTIER_OK;
}

const float* ToyEngine::row(const std::vector<std::uintptr_t>& base, std::uint32_t layer, std::uint32_t slot,
                           std::uint32_t head) const {
  const kernels::KvLayout& l = model_->layout();
  return reinterpret_cast<const float*>(base[layer] + l.slot_offset(slot) + head * l.head_stride);
}

kvtier_status ToyEngine::push_features(std::uint32_t position) {
  if (policy_ != KVTIER_POLICY_VASE && policy_ != KVTIER_POLICY_R_KV) return KVTIER_OK;
  const kernels::KvLayout& l = model_->layout();
  const std::uint32_t slot = *model_->slot_of(position);  // just decoded: in T0
  if (policy_ == KVTIER_POLICY_VASE) {
    // Range of the token's value vector over every layer and KV head.
    float lo = INFINITY, hi = -INFINITY;
    for (std::uint32_t layer = 0; layer < l.num_layers; ++layer) {
      for (std::uint32_t head = 0; head < l.num_kv_heads; ++head) {
        const float* v = row(l.v_base, layer, slot, head);
        for (std::uint32_t d = 0; d < l.head_dim; ++d) {
          lo = std::min(lo, v[d]);
          hi = std::max(hi, v[d]);
        }
      }
    }
    const float range = hi - lo;
    return client_.push_feature(sequence_, KVTIER_FEATURE_VALUE_RANGE, position, std::span(&range, 1));
  }
  // r_kv: the head-mean key of the middle layer.
  std::vector<float> digest(l.head_dim, 0.0f);
  for (std::uint32_t head = 0; head < l.num_kv_heads; ++head) {
    const float* k = row(l.k_base, l.num_layers / 2, slot, head);
    for (std::uint32_t d = 0; d < l.head_dim; ++d) digest[d] += k[d] / static_cast<float>(l.num_kv_heads);
  }
  return client_.push_feature(sequence_, KVTIER_FEATURE_KEY_DIGEST, position, digest);
}

void ToyEngine::compare(const toy::StepOutput& tiered, const toy::StepOutput& full) {
  ++stats_.steps_compared;
  const bool same = tiered.hidden.size() == full.hidden.size() &&
                    std::memcmp(tiered.hidden.data(), full.hidden.data(), full.hidden.size() * sizeof(float)) == 0;
  stats_.steps_identical += same ? 1 : 0;
  for (std::size_t i = 0; i < full.hidden.size(); ++i) {
    stats_.max_abs_diff = std::max(stats_.max_abs_diff, static_cast<double>(std::fabs(tiered.hidden[i] - full.hidden[i])));
  }
}

}  // namespace kvtier::workload
