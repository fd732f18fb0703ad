#include "kv_audit.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

namespace kvtier::workload {
namespace {

const float* row_at(const toy::ToyModel& model, const std::vector<std::uintptr_t>& base, std::uint32_t layer,
                    std::uint32_t slot, std::uint32_t head) {
  const kernels::KvLayout& l = model.layout();
  return reinterpret_cast<const float*>(base[layer] + l.slot_offset(slot) + head * l.head_stride);
}

// The int8 error bound for one element whose quantization range is [lo, hi] or lies inside it
// (kernels/include/kvtier/kernels/quantize.hpp defines the scheme):
//   code = trunc((x − lo)·(255/(hi − lo)) + 0.5),  x̂ = lo + code·scale,  scale = (hi − lo)/255.
// In exact arithmetic |x̂ − x| <= scale/2. In f32 the code's argument (<= 255.5) carries a
// relative error of a few f32 epsilons, i.e. < 1e-4 code units, so a value next to a rounding
// boundary can round the other way: scale·(1/2 + 1e-4). Restoring lo + code·scale in f32 adds at
// most a rounding of the result, under one ulp of max(|lo|, |hi|); we allow two. The toy's dtype
// is f32, so rounding to the dtype adds nothing (for f16/bf16 it would add half an ulp of x̂).
// A narrower true range only shrinks scale and the ulp term, so a superset range gives a bound
// that still holds.
double int8_bound(float lo, float hi) {
  const double scale = (static_cast<double>(hi) - static_cast<double>(lo)) / 255.0;
  const float magnitude = std::max(std::fabs(lo), std::fabs(hi));
  const double ulp = static_cast<double>(std::nextafter(magnitude, std::numeric_limits<float>::infinity())) -
                     static_cast<double>(magnitude);
  return scale * (0.5 + 1e-4) + 2.0 * ulp;
}

}  // namespace

KeyRanges::KeyRanges(std::uint32_t layers, std::uint32_t kv_heads, std::uint32_t head_dim)
    : layers_(layers),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      lo_(std::size_t{layers} * kv_heads * head_dim, std::numeric_limits<float>::infinity()),
      hi_(lo_.size(), -std::numeric_limits<float>::infinity()) {}

void KeyRanges::widen(const toy::ToyModel& model, std::uint32_t position) {
  const std::uint32_t slot = *model.slot_of(position);
  for (std::uint32_t layer = 0; layer < layers_; ++layer) {
    for (std::uint32_t head = 0; head < kv_heads_; ++head) {
      const float* k = row_at(model, model.layout().k_base, layer, slot, head);
      const std::size_t base = (std::size_t{layer} * kv_heads_ + head) * head_dim_;
      for (std::uint32_t d = 0; d < head_dim_; ++d) {
        lo_[base + d] = std::min(lo_[base + d], k[d]);
        hi_[base + d] = std::max(hi_[base + d], k[d]);
      }
    }
  }
}

KvAudit::KvAudit(const toy::ToyConfig& config, const KeyRanges& key_ranges)
    : config_(config),
      key_ranges_(key_ranges),
      row_floats_(std::size_t{config.num_kv_heads} * config.head_dim),
      layers_(config.num_layers) {}

void KvAudit::record(const toy::ToyModel& engine, std::uint32_t position) {
  const std::size_t per_position = std::size_t{config_.num_layers} * 2 * row_floats_;
  mirror_.resize(std::max(mirror_.size(), (std::size_t{position} + 1) * per_position));
  const std::uint32_t slot = *engine.slot_of(position);
  float* out = mirror_.data() + position * per_position;
  for (std::uint32_t layer = 0; layer < config_.num_layers; ++layer) {
    for (const bool key : {true, false}) {
      for (std::uint32_t head = 0; head < config_.num_kv_heads; ++head) {
        const float* src = row_at(engine, key ? engine.layout().k_base : engine.layout().v_base, layer, slot, head);
        out = std::copy_n(src, config_.head_dim, out);
      }
    }
  }
}

const float* KvAudit::mirror(bool key, std::uint32_t position, std::uint32_t layer) const {
  return mirror_.data() + ((std::size_t{position} * config_.num_layers + layer) * 2 + (key ? 0 : 1)) * row_floats_;
}

void KvAudit::restored_from_t2(const toy::ToyModel& engine, std::uint32_t position) {
  const std::uint32_t slot = *engine.slot_of(position);
  std::vector<float> k(row_floats_), v(row_floats_);
  for (std::uint32_t layer = 0; layer < config_.num_layers; ++layer) {
    for (std::uint32_t head = 0; head < config_.num_kv_heads; ++head) {
      std::copy_n(row_at(engine, engine.layout().k_base, layer, slot, head), config_.head_dim,
                  k.data() + head * config_.head_dim);
      std::copy_n(row_at(engine, engine.layout().v_base, layer, slot, head), config_.head_dim,
                  v.data() + head * config_.head_dim);
    }
    ++stats_.rows;
    ++stats_.t2_rows;
    if (!within_int8_bound(layer, k.data(), v.data(), mirror(true, position, layer), mirror(false, position, layer))) {
      ++stats_.t2_bound_violations;
      note("layer " + std::to_string(layer) + " position " + std::to_string(position) +
           ": row restored from T2 beyond the int8 error bound");
    }
  }
  record(engine, position);
}

void KvAudit::begin_step() {
  capturing_ = true;
  for (auto& layer : layers_) {
    layer.positions.clear();
    layer.k.clear();
    layer.v.clear();
  }
}

void KvAudit::capture(std::uint32_t layer, const toy::StagedRows& rows) {
  if (!capturing_ || layer >= layers_.size()) return;
  LayerCapture& c = layers_[layer];
  const std::size_t floats = rows.positions.size() * row_floats_;
  c.positions.assign(rows.positions.begin(), rows.positions.end());
  c.k.assign(rows.k, rows.k + floats);
  c.v.assign(rows.v, rows.v + floats);
}

void KvAudit::note(std::string message) {
  if (notes_.size() < 8) notes_.push_back(std::move(message));
}

bool KvAudit::within_int8_bound(std::uint32_t layer, const float* k, const float* v, const float* mirror_k,
                                const float* mirror_v) {
  const std::uint32_t dim = config_.head_dim;
  bool ok = true;
  for (std::uint32_t head = 0; head < config_.num_kv_heads; ++head) {
    const float* mk = mirror_k + head * dim;
    const float* mv = mirror_v + head * dim;
    // Keys: per channel over the block's rows, bounded by the client-wide channel range.
    const std::size_t channel0 = (std::size_t{layer} * config_.num_kv_heads + head) * dim;
    // Values: per token and head over head_dim, known exactly from the mirror.
    const auto [vlo, vhi] = std::minmax_element(mv, mv + dim);
    const double value_bound = int8_bound(*vlo, *vhi);
    for (std::uint32_t d = 0; d < dim; ++d) {
      const double key_err = std::fabs(static_cast<double>(k[head * dim + d]) - mk[d]);
      const double value_err = std::fabs(static_cast<double>(v[head * dim + d]) - mv[d]);
      stats_.t2_max_abs_err = std::max({stats_.t2_max_abs_err, key_err, value_err});
      const double key_bound = int8_bound(key_ranges_.lo(channel0 + d), key_ranges_.hi(channel0 + d));
      if (!(key_err <= key_bound) || !(value_err <= value_bound)) ok = false;  // NaN fails too
    }
  }
  return ok;
}

void KvAudit::check(const toy::ToyModel& engine, std::span<const std::uint8_t> tiers) {
  capturing_ = false;
  ++stats_.steps;
  const std::uint32_t heads = config_.num_kv_heads;
  const std::size_t head_bytes = config_.head_dim * sizeof(float);
  const std::size_t per_position = std::size_t{config_.num_layers} * 2 * row_floats_;
  const auto count = static_cast<std::uint32_t>(std::min(tiers.size(), mirror_.size() / per_position));
  std::vector<std::optional<std::uint32_t>> t0_slots(count);
  for (std::uint32_t p = 0; p < count; ++p) t0_slots[p] = engine.slot_of(p);
  for (std::uint32_t layer = 0; layer < config_.num_layers; ++layer) {
    const LayerCapture& c = layers_[layer];
    staged_index_.assign(count, -1);
    for (std::size_t i = 0; i < c.positions.size(); ++i) {
      const std::uint32_t p = c.positions[i];
      if (p >= count) {
        ++stats_.tier_mismatch;
        note("staged position " + std::to_string(p) + " was never decoded");
        continue;
      }
      staged_index_[p] = static_cast<std::int32_t>(i);
    }
    for (std::uint32_t p = 0; p < count; ++p) {
      const auto& t0_slot = t0_slots[p];
      const std::int32_t staged = staged_index_[p];
      const std::uint8_t tier = tiers[p];
      const auto where = [&] { return "layer " + std::to_string(layer) + " position " + std::to_string(p); };
      if (tier == KVTIER_T3) {
        if (t0_slot || staged >= 0) {
          ++stats_.tier_mismatch;
          note(where() + ": evicted (T3) by the plans but still attended");
        }
        continue;
      }
      if (!t0_slot && staged < 0) {
        if (stats_.lost.insert(p).second) note(where() + ": live in T" + std::to_string(tier) + " but attended nowhere");
        continue;
      }
      if ((tier == KVTIER_T0) != t0_slot.has_value()) {
        ++stats_.tier_mismatch;
        note(where() + ": plans say T" + std::to_string(tier) + ", attended from " + (t0_slot ? "T0" : "staging"));
      }
      ++stats_.rows;
      const float* mk = mirror(true, p, layer);
      const float* mv = mirror(false, p, layer);
      const float* staged_k = staged >= 0 ? c.k.data() + staged * row_floats_ : nullptr;
      const float* staged_v = staged >= 0 ? c.v.data() + staged * row_floats_ : nullptr;
      if (t0_slot || tier != KVTIER_T2) {
        bool same = true;
        for (std::uint32_t h = 0; h < heads && same; ++h) {
          const float* k = t0_slot ? row_at(engine, engine.layout().k_base, layer, *t0_slot, h)
                                   : staged_k + h * config_.head_dim;
          const float* v = t0_slot ? row_at(engine, engine.layout().v_base, layer, *t0_slot, h)
                                   : staged_v + h * config_.head_dim;
          same = std::memcmp(k, mk + h * config_.head_dim, head_bytes) == 0 &&
                 std::memcmp(v, mv + h * config_.head_dim, head_bytes) == 0;
        }
        if (!same) {
          ++stats_.exact_mismatch;
          note(where() + ": T" + std::to_string(tier) + " row differs from the row the engine wrote");
        }
        continue;
      }
      ++stats_.t2_rows;
      if (!within_int8_bound(layer, staged_k, staged_v, mk, mv)) {
        ++stats_.t2_bound_violations;
        note(where() + ": T2 row beyond the int8 error bound");
      }
    }
  }
}

}  // namespace kvtier::workload
