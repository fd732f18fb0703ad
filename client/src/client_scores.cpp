// Client: what goes onto the score ring. Scores are accumulated per sequence and shipped once per
// interval (score_shipper.hpp; PROTOCOL.md §4 "Score shipping"); features and step-end markers
// go out as they come.
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "client.hpp"
#include "kvtier/protocol/defaults.hpp"

namespace kvtier::client {

void Client::track_scores(std::uint32_t sequence, const ShippingParams& shipping, bool per_step) {
  scores_.insert_or_assign(sequence, SequenceScores(shipping, per_step));
}

Status Client::push_scores(std::uint32_t sequence, std::uint32_t step, std::uint32_t first_position,
                           std::span<const float> values) {
  auto it = scores_.find(sequence);
  if (it == scores_.end() || it->second.per_step()) {
    return push_records(shm::ScoreKind::kAttention, sequence, step, first_position, values, shm::kScoresPerRecord);
  }
  if (auto ok = require_engine("push"); !ok) return ok;
  if (auto record = records_.find(sequence); record != records_.end() && !values.empty()) {
    record->second.grow(first_position + static_cast<std::uint32_t>(values.size()));
  }
  if (!attached_ || forgotten_.contains(sequence)) {  // nobody reads them (a successor restarts scores)
    counters_.score_records_dropped += (values.size() + shm::kScoresPerRecord - 1) / shm::kScoresPerRecord;
    return {};
  }
  it->second.add(first_position, values);
  return {};
}

Status Client::push_score_sums(std::uint32_t sequence, kvtier_score_sum kind, std::uint32_t first_position,
                               std::span<const float> values) {
  if (auto ok = require_engine("push_score_sums"); !ok) return ok;
  auto it = scores_.find(sequence);
  if (it == scores_.end()) return make_error(Errc::kNotFound, "no open sequence " + std::to_string(sequence));
  if (kind != KVTIER_SCORE_SUM_ATTENTION && kind != KVTIER_SCORE_SUM_RECENT) {
    return make_error(Errc::kInvalidArgument, "unknown score sum kind");
  }
  if (!it->second.completes_interval()) {
    return make_error(Errc::kBadState, "sequence " + std::to_string(sequence) +
                                           ": interval sums are pushed in the step that completes an interval");
  }
  if (auto record = records_.find(sequence); record != records_.end() && !values.empty()) {
    record->second.grow(first_position + static_cast<std::uint32_t>(values.size()));
  }
  if (!it->second.add_sums(kind == KVTIER_SCORE_SUM_RECENT, first_position, values)) {
    return make_error(Errc::kBadState, "sequence " + std::to_string(sequence) + ": its policy keeps no recent attention");
  }
  return {};
}

Result<bool> Client::completes_interval(std::uint32_t sequence) const {
  auto it = scores_.find(sequence);
  if (it == scores_.end()) return make_error(Errc::kNotFound, "no open sequence " + std::to_string(sequence));
  return it->second.completes_interval();
}

Status Client::push_feature(std::uint32_t sequence, kvtier_feature feature, std::uint32_t first_position,
                            std::span<const float> values) {
  auto dim = digest_dims_.find(sequence);
  const std::uint32_t digest_dim = dim == digest_dims_.end() ? 0 : dim->second;
  if (feature == KVTIER_FEATURE_VALUE_RANGE) {
    return push_records(shm::ScoreKind::kValueRange, sequence, 0, first_position, values, shm::kScoresPerRecord);
  }
  if (feature != KVTIER_FEATURE_KEY_DIGEST) return make_error(Errc::kInvalidArgument, "unknown feature");
  if (digest_dim == 0 || digest_dim > shm::kScoresPerRecord || values.size() % digest_dim != 0) {
    return make_error(Errc::kInvalidArgument, "key digests need a whole number of digests of 1.." +
                                                  std::to_string(shm::kScoresPerRecord) + " floats");
  }
  // Whole digests per record; positions advance by one per digest.
  const std::uint32_t per_record = shm::kScoresPerRecord / digest_dim * digest_dim;
  return push_records(shm::ScoreKind::kKeyDigest, sequence, 0, first_position, values, per_record, digest_dim);
}

Status Client::push_records(shm::ScoreKind kind, std::uint32_t sequence, std::uint32_t step,
                            std::uint32_t first_position, std::span<const float> values, std::uint32_t per_record,
                            std::uint32_t floats_per_position) {
  if (auto ok = require_engine("push"); !ok) return ok;
  if (auto it = records_.find(sequence); it != records_.end() && !values.empty()) {
    it->second.grow(first_position + static_cast<std::uint32_t>((values.size() - 1) / floats_per_position + 1));
  }
  if (!attached_ || forgotten_.contains(sequence)) {  // nobody reads them: dropped, like on a full ring
    counters_.score_records_dropped += (values.size() + per_record - 1) / per_record;
    return {};
  }
  // One batch per call: one counter store and one look at the daemon's sleep flag.
  batch_.clear();
  for (std::size_t done = 0; done < values.size(); done += per_record) {
    const std::size_t n = std::min<std::size_t>(per_record, values.size() - done);
    shm::ScoreRecord& record = batch_.emplace_back();
    record.sequence = sequence;
    record.step = step;
    record.kind = static_cast<std::uint16_t>(kind);
    record.first_position = first_position + static_cast<std::uint32_t>(done / floats_per_position);
    record.count = static_cast<std::uint16_t>(n);
    std::memcpy(record.values, values.data() + done, n * sizeof(float));
  }
  const shm::BatchPushResult pushed = rings_->scores.push_batch(batch_);
  counters_.score_records_pushed += pushed.pushed;
  counters_.score_records_dropped += pushed.dropped;
  if (pushed.wake) ring_doorbell();
  return {};
}

Status Client::step_end(std::uint32_t sequence, std::uint32_t step) {
  if (auto ok = require_engine("step_end"); !ok) return ok;
  if (!attached_ || forgotten_.contains(sequence)) {
    ++counters_.score_records_dropped;
    return {};
  }
  auto it = scores_.find(sequence);
  SequenceScores* scores = it == scores_.end() ? nullptr : &it->second;
  const bool ships = scores != nullptr && scores->completes_interval();
  batch_.clear();
  if (ships) scores->take_sums(sequence, batch_);
  shm::ScoreRecord& marker = batch_.emplace_back();
  marker.sequence = sequence;
  marker.step = step;
  marker.kind = static_cast<std::uint16_t>(shm::ScoreKind::kStepEnd);
  // The positions published so far: kvtierd's length follows them between decisions.
  if (auto record = records_.find(sequence); record != records_.end()) marker.first_position = record->second.length;
  // Sums and marker in one batch: one publish, and the marker only after the sums it closes.
  const shm::BatchPushResult pushed = rings_->scores.push_batch(batch_);
  if (pushed.wake) ring_doorbell();
  counters_.score_records_pushed += pushed.pushed;
  const bool marker_pushed = pushed.pushed == batch_.size();
  if (ships && pushed.pushed < batch_.size() - 1) {
    // Sums the ring could not take go out with the next interval's instead of being lost.
    const std::span<const shm::ScoreRecord> unshipped(batch_.data() + pushed.pushed, batch_.size() - 1 - pushed.pushed);
    for (const shm::ScoreRecord& r : unshipped) counters_.score_positions_deferred += r.count;
    scores->carry(unshipped);
  }
  if (!marker_pushed) {
    ++counters_.score_records_dropped;  // the step is not counted: kvtierd does not count it either
    return {};
  }
  if (scores != nullptr) scores->step_counted(ships);
  return {};
}

}  // namespace kvtier::client
