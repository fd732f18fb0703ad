// SequenceScores (score_shipper.hpp).
#include "score_shipper.hpp"

#include <algorithm>
#include <cstring>

namespace kvtier::client {
namespace {

// Splits sums[first, end) into records of kind `kind`.
void append_records(shm::ScoreKind kind, std::uint32_t sequence, const kernels::IntervalSum& sum,
                    std::span<const float> sums, std::vector<shm::ScoreRecord>& out) {
  for (std::uint32_t p = sum.touched_begin(); p < sum.touched_end(); p += shm::kScoresPerRecord) {
    const std::uint32_t n = std::min<std::uint32_t>(shm::kScoresPerRecord, sum.touched_end() - p);
    shm::ScoreRecord& record = out.emplace_back();
    record.sequence = sequence;
    record.first_position = p;
    record.count = static_cast<std::uint16_t>(n);
    record.kind = static_cast<std::uint16_t>(kind);
    record.step = 0;
    std::memcpy(record.values, sums.data() + p, n * sizeof(float));
  }
}

}  // namespace

ShippingParams shipping_from_wire(wire::ScoreShipping::Reader wire) {
  return {wire.getInterval(), wire.getStepsDone(), wire.getScoreFactor(), wire.getRecentSums(),
          wire.getRecentFactor()};
}

SequenceScores::SequenceScores(const ShippingParams& params, bool per_step)
    : params_(params), per_step_(per_step || params.interval == 0), sums_(params.score_factor) {
  if (params_.recent) recent_.emplace(params_.recent_factor);
}

void SequenceScores::add(std::uint32_t first, std::span<const float> values) {
  sums_.add(first, values);
  if (recent_) recent_->add(first, values);
}

bool SequenceScores::add_sums(bool recent, std::uint32_t first, std::span<const float> sums) {
  if (!recent) {
    sums_.add(first, sums);
    return true;
  }
  if (!recent_) return false;
  recent_->add(first, sums);
  return true;
}

bool SequenceScores::completes_interval() const noexcept {
  return !per_step_ && (params_.steps_done + 1) % params_.interval == 0;
}

void SequenceScores::take_sums(std::uint32_t sequence, std::vector<shm::ScoreRecord>& out) {
  append_records(shm::ScoreKind::kAttentionSum, sequence, sums_, sums_.finish(), out);
  if (recent_) append_records(shm::ScoreKind::kRecentSum, sequence, *recent_, recent_->finish(), out);
  sums_.reset();
  if (recent_) recent_->reset();
}

void SequenceScores::carry(std::span<const shm::ScoreRecord> unshipped) {
  for (const shm::ScoreRecord& record : unshipped) {
    const std::span<const float> values(record.values, record.count);
    if (record.kind == static_cast<std::uint16_t>(shm::ScoreKind::kAttentionSum)) {
      sums_.add(record.first_position, values);
    } else if (recent_) {
      recent_->add(record.first_position, values);
    }
  }
}

void SequenceScores::step_counted(bool shipped) {
  ++params_.steps_done;
  if (shipped) return;  // the sums restarted: nothing is pending for this step
  sums_.end_step();
  if (recent_) recent_->end_step();
}

std::size_t SequenceScores::bytes() const noexcept {
  return sums_.bytes() + (recent_ ? recent_->bytes() : 0);
}

}  // namespace kvtier::client
