#include "client_channel.hpp"

#include <unistd.h>

#include <array>
#include <cmath>

namespace kvtier::daemon {
namespace {
constexpr std::size_t kScoreBatch = 64;
}  // namespace

ClientChannel::ClientChannel(asio::io_context& io, std::uint32_t client_id, shm::Segment control,
                             const shm::ControlLayout& layout, shm::UniqueFd doorbell,
                             const config::DaemonConfig& config, spdlog::logger& log, FailFn on_fail)
    : client_id_(client_id),
      config_(config),
      log_(log),
      on_fail_(std::move(on_fail)),
      control_(std::move(control)),
      rings_(shm::daemon_rings(control_, layout)),
      doorbell_(io, doorbell.release()) {
  service();
}

ClientChannel::~ClientChannel() {
  std::error_code ignored;
  doorbell_.cancel(ignored);
}

void ClientChannel::set_pool(shm::Segment pool, const shm::PoolGeometry& geometry) {
  pool_ = std::move(pool);
  geometry_ = geometry;
}

void ClientChannel::open_sequence(std::uint32_t sequence_id, std::uint32_t prompt_length) {
  sequences_[sequence_id] = Sequence{prompt_length, prompt_length};
}

void ClientChannel::close_sequence(std::uint32_t sequence_id) {
  service();  // records pushed before the close still count
  sequences_.erase(sequence_id);
}

ClientSnapshot ClientChannel::snapshot() const {
  ClientSnapshot out;
  out.client_id = client_id_;
  out.score_records = score_records_;
  out.scores_dropped = rings_.scores.dropped();
  out.errors = errors_;
  for (const auto& [id, seq] : sequences_) {
    SequenceSnapshot s;
    s.sequence_id = id;
    s.prompt_length = seq.prompt_length;
    s.tokens = seq.tokens;
    s.tokens_t0 = seq.tokens;
    out.sequences.push_back(s);
  }
  return out;
}

void ClientChannel::service() {
  if (failed_) return;
  for (;;) {
    if (auto drained = drain_scores(); !drained) return fail(drained.error());
    // Sleep only when both rings are idle; announce_sleep re-checks after raising the flag so a
    // push racing with it is never missed (the client then rings the doorbell).
    if (!rings_.scores.announce_sleep()) continue;
    if (!rings_.plans.announce_sleep()) {
      rings_.scores.cancel_sleep();
      continue;
    }
    break;
  }
  arm_doorbell();
}

void ClientChannel::arm_doorbell() {
  doorbell_.async_wait(asio::posix::stream_descriptor::wait_read, [this](std::error_code ec) {
    if (ec) return;  // cancelled: the channel may already be gone, touch nothing
    std::uint64_t count = 0;
    [[maybe_unused]] const ssize_t n = ::read(doorbell_.native_handle(), &count, sizeof(count));
    rings_.scores.cancel_sleep();
    rings_.plans.cancel_sleep();
    service();
  });
}

Status ClientChannel::drain_scores() {
  std::array<shm::ScoreRecord, kScoreBatch> batch;
  for (;;) {
    auto popped = rings_.scores.pop(batch);
    if (!popped) return tl::unexpected(popped.error());
    for (std::size_t i = 0; i < *popped; ++i) {
      if (auto ok = ingest(batch[i]); !ok) return ok;
    }
    score_records_ += *popped;
    if (*popped < batch.size()) return {};
  }
}

Status ClientChannel::ingest(const shm::ScoreRecord& record) {
  auto it = sequences_.find(record.sequence);
  if (it == sequences_.end()) {
    return make_error(Errc::kNotFound, "score record for unknown sequence " + std::to_string(record.sequence));
  }
  const std::uint64_t end = std::uint64_t{record.first_position} + record.count;
  if (end > config_.limits.max_tokens_per_sequence) {
    return make_error(Errc::kInvalidArgument, "score record for positions [" + std::to_string(record.first_position) +
                                                  ", " + std::to_string(end) + ") beyond limits.max_tokens_per_sequence=" +
                                                  std::to_string(config_.limits.max_tokens_per_sequence));
  }
  for (std::uint32_t i = 0; i < record.count; ++i) {
    const float v = record.values[i];
    if (!std::isfinite(v) || v < 0.0f) {
      return make_error(Errc::kInvalidArgument, "score " + std::to_string(v) + " at position " +
                                                    std::to_string(record.first_position + i) + " of sequence " +
                                                    std::to_string(record.sequence) + " is not a finite non-negative number");
    }
  }
  Sequence& seq = it->second;
  if (end > seq.tokens) seq.tokens = static_cast<std::uint32_t>(end);
  return {};
}

void ClientChannel::fail(const Error& error) {
  failed_ = true;
  ++errors_;
  log_.warn("event=client_ring_error client_id={} code={} message=\"{}\"", client_id_, errc_name(error.code),
            error.message);
  on_fail_(error);
}

}  // namespace kvtier::daemon
