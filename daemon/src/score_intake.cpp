#include "score_intake.hpp"

#include <span>
#include <string>

namespace kvtier::daemon {

Status ScoreIntake::drain(Sequences& sequences) {
  shm::ScoreRecord record;
  // A sums push is hundreds of records of one sequence in a row: one find() serves the run, up
  // to its step end (after step_ended the channel may have changed what find() would return).
  bool found = false;  // target is find(found_sequence)
  std::uint32_t found_sequence = 0;
  Target target;
  for (;;) {
    auto available = ring_.available(kBatch);
    if (!available) return tl::unexpected(available.error());
    // Each record is handled as soon as it is copied out (score_ring.hpp says why).
    for (std::size_t k = 0; k < *available; ++k) {
      if (auto ok = ring_.take(k, record); !ok) return ok;
      if (!found || found_sequence != record.sequence) {
        target = sequences.find(record.sequence);
        found = true;
        found_sequence = record.sequence;
      }
      if (record.kind == static_cast<std::uint16_t>(shm::ScoreKind::kStepEnd)) found = false;
      if (auto ok = apply(record, target, sequences); !ok) return ok;
    }
    ring_.release(*available);
    records_ += *available;
    if (*available < kBatch) return {};
  }
}

Status ScoreIntake::apply(const shm::ScoreRecord& record, const Target& target, Sequences& sequences) {
  if (target.ignored) {
    ++ignored_;  // pushed before the client exported it, or by mistake: it is frozen
    return {};
  }
  if (target.tiers == nullptr) {
    return make_error(Errc::kNotFound, "score record for unknown sequence " + std::to_string(record.sequence));
  }
  tier::SequenceTiers& tiers = *target.tiers;
  const std::span<const float> values(record.values, record.count);
  Status added;
  switch (static_cast<shm::ScoreKind>(record.kind)) {
    case shm::ScoreKind::kAttention: added = tiers.accumulate_step_scores(record.first_position, values); break;
    case shm::ScoreKind::kAttentionSum: added = tiers.add_score_sums(record.first_position, values); break;
    case shm::ScoreKind::kRecentSum: added = tiers.add_recent_sums(record.first_position, values); break;
    case shm::ScoreKind::kStepEnd: return end_step(record, target, sequences);
    case shm::ScoreKind::kValueRange: added = tiers.add_value_ranges(record.first_position, values); break;
    case shm::ScoreKind::kKeyDigest:
      added = tiers.add_key_digests(record.first_position, values, target.digest_dim);
      break;
    default:
      return make_error(Errc::kProtocol, "score record of unknown kind " + std::to_string(record.kind));
  }
  if (!added) {
    return make_error(added.error().code, "sequence " + std::to_string(record.sequence) + ": " + added.error().message);
  }
  return {};
}

Status ScoreIntake::end_step(const shm::ScoreRecord& record, const Target& target, Sequences& sequences) {
  std::optional<std::uint32_t>& last = *target.last_step;
  if (last && record.step <= *last) {
    return make_error(Errc::kInvalidArgument, "sequence " + std::to_string(record.sequence) + ": step " +
                                                  std::to_string(record.step) + " ended after step " +
                                                  std::to_string(*last));
  }
  // The marker's first_position is the client's length (0 from a client that does not say).
  if (auto grown = target.tiers->grow_to(record.first_position); !grown) {
    return make_error(grown.error().code, "sequence " + std::to_string(record.sequence) + ": step end: " +
                                              grown.error().message);
  }
  last = record.step;
  target.tiers->end_step();
  return sequences.step_ended(record.sequence);
}

}  // namespace kvtier::daemon
