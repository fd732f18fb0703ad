// ToyModel: plain loops with a fixed summation order, so equal inputs in equal order give
// bit-equal outputs.
#include "kvtier/toy/toy_model.hpp"

#include "kvtier/base/check.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace kvtier::toy {

// A live key of one layer: its position and head 0 of its K and V (heads head_stride apart).
struct ToyModel::Key {
  std::uint32_t position;
  const float* k;
  const float* v;
  std::size_t head_stride;
};

namespace {

// splitmix64: a seeded generator whose output does not depend on the standard library.
class Random {
 public:
  explicit Random(std::uint64_t seed) : state_(seed) {}
  float uniform() {  // in [-1, 1)
    state_ += 0x9E3779B97F4A7C15ULL;
    std::uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }

 private:
  std::uint64_t state_;
};

std::vector<float> random_matrix(Random& random, std::size_t rows, std::size_t cols) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
  std::vector<float> m(rows * cols);
  for (float& w : m) w = random.uniform() * scale;
  return m;
}

// out[r] = sum_c w[r][c] * x[c], summed in column order.
void matvec(const std::vector<float>& w, std::span<const float> x, std::span<float> out) {
  for (std::size_t r = 0; r < out.size(); ++r) {
    float acc = 0.0f;
    for (std::size_t c = 0; c < x.size(); ++c) acc += w[r * x.size() + c] * x[c];
    out[r] = acc;
  }
}

std::vector<float> rmsnorm(std::span<const float> x) {
  float sum = 0.0f;
  for (float v : x) sum += v * v;
  const float inv = 1.0f / std::sqrt(sum / static_cast<float>(x.size()) + 1e-6f);
  std::vector<float> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv;
  return out;
}

Error invalid(std::string message) {
  return Error{Errc::kInvalidArgument, "toy model: " + std::move(message)};
}

}  // namespace

ToyModel::ToyModel(const ToyConfig& config, std::uint64_t seed) : config_(config) {
  KVTIER_CHECK(config.num_layers > 0 && config.num_q_heads > 0 && config.num_kv_heads > 0,
               "toy model needs layers and heads");
  KVTIER_CHECK(config.num_q_heads % config.num_kv_heads == 0,
               "query heads must be a multiple of KV heads");
  KVTIER_CHECK(config.head_dim > 0 && config.head_dim % 2 == 0, "head_dim must be even (RoPE)");
  KVTIER_CHECK(config.max_slots > 0 && config.vocab_size > 0, "toy model needs slots and a vocab");
  Random random(seed);
  const std::size_t dm = config.model_dim();
  const std::size_t kv_dim = std::size_t{config.num_kv_heads} * config.head_dim;
  embedding_.resize(std::size_t{config.vocab_size} * dm);
  for (float& e : embedding_) e = random.uniform();
  for (std::uint32_t l = 0; l < config.num_layers; ++l) {
    LayerWeights w;
    w.wq = random_matrix(random, dm, dm);
    w.wk = random_matrix(random, kv_dim, dm);
    w.wv = random_matrix(random, kv_dim, dm);
    w.wo = random_matrix(random, dm, dm);
    layers_.push_back(std::move(w));
  }
  std::vector<std::uintptr_t> k_base, v_base;
  for (std::uint32_t l = 0; l < config.num_layers; ++l) {
    k_cache_.emplace_back(kv_dim * config.max_slots, 0.0f);
    v_cache_.emplace_back(kv_dim * config.max_slots, 0.0f);
    k_base.push_back(reinterpret_cast<std::uintptr_t>(k_cache_.back().data()));
    v_base.push_back(reinterpret_cast<std::uintptr_t>(v_cache_.back().data()));
  }
  layout_ = kernels::make_hf_layout(config.num_layers, config.num_kv_heads, config.head_dim,
                                    kernels::KvDtype::kF32, config.max_slots, std::move(k_base),
                                    std::move(v_base));
  for (std::uint32_t s = 0; s < config.max_slots; ++s) free_slots_.insert(s);
}

std::vector<float> ToyModel::embed(std::uint32_t token) const {
  const std::size_t dm = config_.model_dim();
  const std::size_t row = token % config_.vocab_size;
  return {embedding_.begin() + static_cast<std::ptrdiff_t>(row * dm),
          embedding_.begin() + static_cast<std::ptrdiff_t>((row + 1) * dm)};
}

float* ToyModel::k_at(std::uint32_t layer, std::uint32_t slot, std::uint32_t head) noexcept {
  return k_cache_[layer].data() + (std::size_t{head} * config_.max_slots + slot) * config_.head_dim;
}

float* ToyModel::v_at(std::uint32_t layer, std::uint32_t slot, std::uint32_t head) noexcept {
  return v_cache_[layer].data() + (std::size_t{head} * config_.max_slots + slot) * config_.head_dim;
}

void ToyModel::rope(std::span<float> heads, std::uint32_t position) const {
  const std::uint32_t d = config_.head_dim;
  for (std::size_t base = 0; base < heads.size(); base += d) {
    for (std::uint32_t i = 0; i < d / 2; ++i) {
      const double freq = std::pow(config_.rope_theta, -2.0 * i / static_cast<double>(d));
      const double angle = static_cast<double>(position) * freq;
      const auto c = static_cast<float>(std::cos(angle));
      const auto s = static_cast<float>(std::sin(angle));
      const float x0 = heads[base + 2 * i];
      const float x1 = heads[base + 2 * i + 1];
      heads[base + 2 * i] = x0 * c - x1 * s;
      heads[base + 2 * i + 1] = x0 * s + x1 * c;
    }
  }
}

Result<std::vector<ToyModel::Key>> ToyModel::gather_keys(std::uint32_t layer,
                                                         std::uint32_t position,
                                                         StagingSource* staging) {
  std::vector<Key> resident;
  resident.reserve(slots_.size());
  const std::size_t t0_stride = std::size_t{config_.max_slots} * config_.head_dim;
  for (const auto& [pos, slot] : slots_) {
    resident.push_back(Key{pos, k_at(layer, slot, 0), v_at(layer, slot, 0), t0_stride});
  }
  if (staging == nullptr) return resident;
  auto staged = staging->stage(layer);
  if (!staged) return tl::unexpected(staged.error());
  const std::size_t row = std::size_t{config_.num_kv_heads} * config_.head_dim;
  std::vector<Key> rows;
  for (std::size_t i = 0; i < staged->positions.size(); ++i) {
    const std::uint32_t pos = staged->positions[i];
    if (pos > position)
      return tl::unexpected(invalid("staged position " + std::to_string(pos) + " is after " +
                                    std::to_string(position)));
    if (staged->order == kernels::StagingOrder::kPositionOrder && i > 0 &&
        pos <= staged->positions[i - 1]) {
      return tl::unexpected(invalid("staged positions are not ascending"));
    }
    rows.push_back(Key{pos, staged->k + i * row, staged->v + i * row, config_.head_dim});
  }
  std::vector<Key> keys;
  keys.reserve(resident.size() + rows.size());
  const auto by_position = [](const Key& a, const Key& b) { return a.position < b.position; };
  if (staged->order == kernels::StagingOrder::kPositionOrder) {
    std::merge(resident.begin(), resident.end(), rows.begin(), rows.end(), std::back_inserter(keys),
               by_position);
  } else {
    keys = resident;
    keys.insert(keys.end(), rows.begin(), rows.end());
  }
  std::vector<std::uint32_t> positions;
  for (const Key& key : keys) positions.push_back(key.position);
  std::sort(positions.begin(), positions.end());
  if (auto dup = std::adjacent_find(positions.begin(), positions.end()); dup != positions.end()) {
    return tl::unexpected(invalid("position " + std::to_string(*dup) + " is live twice"));
  }
  return keys;
}

void ToyModel::attend(std::span<const Key> keys, std::span<const float> q, std::span<float> out,
                      std::map<std::uint32_t, float>& scores) const {
  const std::uint32_t d = config_.head_dim;
  const std::uint32_t group = config_.num_q_heads / config_.num_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float weight = 1.0f / static_cast<float>(config_.num_q_heads * config_.num_layers);
  std::vector<float> p(keys.size());
  std::fill(out.begin(), out.end(), 0.0f);
  for (std::uint32_t qh = 0; qh < config_.num_q_heads; ++qh) {
    const std::size_t kv_head = qh / group;
    const float* qv = q.data() + std::size_t{qh} * d;
    float max_logit = -INFINITY;
    for (std::size_t j = 0; j < keys.size(); ++j) {
      const float* k = keys[j].k + kv_head * keys[j].head_stride;
      float dot = 0.0f;
      for (std::uint32_t i = 0; i < d; ++i) dot += qv[i] * k[i];
      p[j] = dot * scale;
      max_logit = std::max(max_logit, p[j]);
    }
    float sum = 0.0f;
    for (float& e : p) {
      e = std::exp(e - max_logit);
      sum += e;
    }
    float* o = out.data() + std::size_t{qh} * d;
    for (std::size_t j = 0; j < keys.size(); ++j) {
      p[j] /= sum;
      const float* v = keys[j].v + kv_head * keys[j].head_stride;
      for (std::uint32_t i = 0; i < d; ++i) o[i] += p[j] * v[i];
      scores[keys[j].position] += p[j] * weight;
    }
  }
}

Result<StepOutput> ToyModel::decode_step(std::span<const float> input, std::uint32_t position,
                                         StagingSource* staging) {
  const std::size_t dm = config_.model_dim();
  if (input.size() != dm) {
    return tl::unexpected(invalid("input has " + std::to_string(input.size()) +
                                  " values, model_dim is " + std::to_string(dm)));
  }
  if (slots_.contains(position)) {
    return tl::unexpected(invalid("position " + std::to_string(position) + " is already in T0"));
  }
  auto slot = admit(position);
  if (!slot) return tl::unexpected(slot.error());
  const std::uint32_t d = config_.head_dim;
  const std::size_t kv_dim = std::size_t{config_.num_kv_heads} * d;
  std::vector<float> h(input.begin(), input.end());
  std::vector<float> q(dm), k(kv_dim), v(kv_dim), attn(dm), proj(dm);
  std::map<std::uint32_t, float> scores;
  for (std::uint32_t l = 0; l < config_.num_layers; ++l) {
    const LayerWeights& w = layers_[l];
    const std::vector<float> x = rmsnorm(h);
    matvec(w.wq, x, q);
    matvec(w.wk, x, k);
    matvec(w.wv, x, v);
    rope(q, position);
    rope(k, position);
    for (std::uint32_t head = 0; head < config_.num_kv_heads; ++head) {
      std::copy_n(k.data() + head * d, d, k_at(l, *slot, head));
      std::copy_n(v.data() + head * d, d, v_at(l, *slot, head));
    }
    auto keys = gather_keys(l, position, staging);
    if (!keys) {
      slots_.erase(position);  // the step did not happen: give the slot back
      free_slots_.insert(*slot);
      return tl::unexpected(keys.error());
    }
    attend(*keys, q, attn, scores);
    matvec(w.wo, attn, proj);
    for (std::size_t i = 0; i < dm; ++i) h[i] += proj[i];
  }
  StepOutput out{std::move(h), {}, {}};
  for (const auto& [pos, score] : scores) {
    out.positions.push_back(pos);
    out.scores.push_back(score);
  }
  return out;
}

Result<StepOutput> ToyModel::decode_token(std::uint32_t token, std::uint32_t position,
                                          StagingSource* staging) {
  return decode_step(embed(token), position, staging);
}

Result<StepOutput> ToyModel::prefill(std::span<const std::uint32_t> tokens,
                                     std::uint32_t first_position) {
  if (tokens.empty()) return tl::unexpected(invalid("prefill of no tokens"));
  Result<StepOutput> last;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    last = decode_token(tokens[i], first_position + static_cast<std::uint32_t>(i));
    if (!last) return last;
  }
  return last;
}

std::optional<std::uint32_t> ToyModel::slot_of(std::uint32_t position) const {
  const auto it = slots_.find(position);
  if (it == slots_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::uint32_t> ToyModel::resident_positions() const {
  std::vector<std::uint32_t> positions;
  for (const auto& entry : slots_) positions.push_back(entry.first);
  return positions;
}

Result<std::uint32_t> ToyModel::release(std::uint32_t position) {
  const auto it = slots_.find(position);
  if (it == slots_.end()) {
    return tl::unexpected(invalid("position " + std::to_string(position) + " is not in T0"));
  }
  const std::uint32_t slot = it->second;
  slots_.erase(it);
  free_slots_.insert(slot);
  return slot;
}

Result<std::uint32_t> ToyModel::admit(std::uint32_t position) {
  if (slots_.contains(position)) {
    return tl::unexpected(invalid("position " + std::to_string(position) + " is already in T0"));
  }
  if (free_slots_.empty()) {
    return tl::unexpected(Error{Errc::kLimitExceeded, "toy model: no free HBM slot"});
  }
  const std::uint32_t slot = *free_slots_.begin();
  free_slots_.erase(free_slots_.begin());
  slots_.emplace(position, slot);
  return slot;
}

}  // namespace kvtier::toy
