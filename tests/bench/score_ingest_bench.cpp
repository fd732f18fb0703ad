// score_ingest: score records from a producer thread (the client's ScoreProducer, over a real
// control segment mapped like a client maps it) through the score ring to a consumer thread (the
// daemon's ScoreConsumer) that pops them — copy out, validate — and accumulates each into a
// tier::SequenceTiers with add_scores(), calling end_step() at each step boundary. A step is a
// 2,000-token sequence's 2,000 scores = 34 records (goal C1, research/perf-anchors.md §9).
//
// Baseline: single-thread memcpy of the same number of score bytes, a step (8,000 B) at a time,
// from a source window as large as the ring's slots into an 8,000-B destination — the same
// working set the ingest touches — measured in the same run, alternating with the ingest runs.
//
// The client never blocks, so a full ring drops records. The producer here emulates a client
// that computes between steps: before a step it waits (bounded, 1 ms) for room for the whole
// step, then pushes without blocking; whatever is dropped anyway is counted, excluded from the
// ingested bytes and reported on stderr.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <span>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "ipc_fixture.hpp"
#include "kvtier/shm/control_segment.hpp"
#include "kvtier/tier/sequence_tiers.hpp"

namespace kvtier::bench {
namespace {

constexpr std::uint32_t kTokens = 2000;
constexpr std::uint32_t kRingCapacity = 1024;
constexpr std::uint32_t kRecordsPerStep = (kTokens + shm::kScoresPerRecord - 1) / shm::kScoresPerRecord;
constexpr std::size_t kPopBatch = 64;
constexpr auto kRoomWait = std::chrono::milliseconds(1);
static_assert(kRecordsPerStep == 34);

struct IngestRun {
  double seconds = 0.0;
  std::uint64_t score_bytes = 0;  // accepted scores x 4 B
  std::uint64_t dropped = 0;      // records
};

// Per-step scores: small positive values that change from step to step.
std::vector<float> make_step_scores() {
  std::vector<float> scores(kTokens);
  for (std::uint32_t i = 0; i < kTokens; ++i) scores[i] = 1.0f / static_cast<float>(1 + i % 97);
  return scores;
}

void produce(shm::ScoreProducer& producer, std::span<const float> scores, std::uint32_t steps,
             const std::atomic<bool>& go) {
  while (!go.load(std::memory_order_acquire)) cpu_pause();
  shm::ScoreRecord record{};
  record.sequence = 1;
  for (std::uint32_t step = 0; step < steps; ++step) {
    const auto until = Clock::now() + kRoomWait;
    spin_until([&] { return producer.free_slots() >= kRecordsPerStep; }, until);
    record.step = step;
    for (std::uint32_t first = 0; first < kTokens; first += shm::kScoresPerRecord) {
      record.first_position = first;
      record.count = static_cast<std::uint16_t>(std::min(shm::kScoresPerRecord, kTokens - first));
      std::memcpy(record.values, scores.data() + first, record.count * sizeof(float));
      producer.push(record);
    }
  }
}

// Pops until the producer is done and the ring is drained; returns accepted scores or -1.
std::int64_t consume(shm::ScoreConsumer& consumer, tier::SequenceTiers& sequence,
                     const std::atomic<std::uint64_t>& final_write) {
  std::vector<shm::ScoreRecord> batch(kPopBatch);
  std::int64_t scores = 0;
  std::uint32_t current_step = 0;
  for (;;) {
    auto popped = consumer.pop(batch);
    if (!popped) return -1;
    if (*popped == 0) {
      if (consumer.consumed() == final_write.load(std::memory_order_acquire)) break;
      cpu_pause();
      continue;
    }
    for (std::size_t i = 0; i < *popped; ++i) {
      const shm::ScoreRecord& r = batch[i];
      if (r.sequence != 1) return -1;
      if (r.step != current_step) {
        sequence.end_step();
        current_step = r.step;
      }
      if (!sequence.add_scores(r.first_position, std::span<const float>(r.values, r.count))) {
        return -1;
      }
      scores += r.count;
    }
  }
  sequence.end_step();
  return scores;
}

Result<IngestRun> run_ingest(const BenchSegment& bench, std::span<const float> scores,
                             std::uint32_t steps) {
  auto mapping = shm::Mapping::map_segment(bench.segment.fd(), shm::SegmentKind::kControl, 1);
  if (!mapping) return tl::unexpected(mapping.error());
  auto client = shm::client_rings(*mapping);
  if (!client) return tl::unexpected(client.error());
  shm::ScoreProducer producer = client->scores;
  shm::ScoreConsumer consumer = shm::daemon_rings(bench.segment, bench.layout).scores;
  auto sequence = tier::SequenceTiers::create(0, tier::TierParams{}, kTokens);
  if (!sequence) return tl::unexpected(sequence.error());

  std::atomic<bool> go{false};
  std::atomic<std::uint64_t> final_write{~std::uint64_t{0}};
  const std::uint64_t dropped_before = producer.dropped();
  std::thread producer_thread([&] {
    produce(producer, scores, steps, go);
    final_write.store(producer.published(), std::memory_order_release);
  });
  const auto start = Clock::now();
  go.store(true, std::memory_order_release);
  const std::int64_t accepted = consume(consumer, *sequence, final_write);
  const auto end = Clock::now();
  producer_thread.join();
  if (accepted < 0) return make_error(Errc::kInternal, "score_ingest: the consumer rejected a record");
  IngestRun result;
  result.seconds = seconds_between(start, end);
  result.score_bytes = static_cast<std::uint64_t>(accepted) * sizeof(float);
  result.dropped = producer.dropped() - dropped_before;
  return result;
}

// Copies `bytes` a step at a time from a cycling source window into one step-sized destination.
double run_memcpy(std::span<const std::byte> source, std::span<std::byte> destination,
                  std::uint64_t bytes) {
  const std::size_t chunk = destination.size();
  std::size_t offset = 0;
  const auto start = Clock::now();
  for (std::uint64_t left = bytes; left > 0;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, chunk));
    if (offset + n > source.size()) offset = 0;
    std::memcpy(destination.data(), source.data() + offset, n);
    do_not_optimize(destination[0]);
    offset += n;
    left -= n;
  }
  return seconds_between(start, Clock::now());
}

Status run(const RunConfig& config, Reporter& reporter) {
  auto segment = create_bench_control_segment("ingest", 4, kRingCapacity, 1);
  if (!segment) return tl::unexpected(segment.error());

  const std::vector<float> scores = make_step_scores();
  const std::uint32_t steps = config.quick ? 10000 : 40000;
  const int repeats = config.quick ? 3 : 11;
  std::vector<std::byte> source(std::size_t{kRingCapacity} * sizeof(shm::ScoreRecord), std::byte{1});
  std::vector<std::byte> destination(std::size_t{kTokens} * sizeof(float));

  // Warm-up: threads, ring pages, caches.
  if (auto warm = run_ingest(*segment, scores, steps / 10); !warm) return tl::unexpected(warm.error());
  std::vector<double> ingest_rates;
  std::vector<double> memcpy_rates;
  std::uint64_t dropped = 0;
  std::uint64_t ingested = 0;
  for (int r = 0; r < repeats; ++r) {
    auto run_result = run_ingest(*segment, scores, steps);
    if (!run_result) return tl::unexpected(run_result.error());
    const IngestRun& ingest = *run_result;
    ingest_rates.push_back(static_cast<double>(ingest.score_bytes) / ingest.seconds);
    dropped += ingest.dropped;
    ingested += ingest.score_bytes;
    const double copy_seconds = run_memcpy(source, destination, ingest.score_bytes);
    memcpy_rates.push_back(static_cast<double>(ingest.score_bytes) / copy_seconds);
  }
  const double ingest_rate = median(ingest_rates);
  const double memcpy_rate = median(memcpy_rates);
  char note[160];
  std::snprintf(note, sizeof(note), "%d runs of %u steps x %u records; ingested %.1f MB, dropped %llu records",
                repeats, steps, kRecordsPerStep, static_cast<double>(ingested) / 1e6,
                static_cast<unsigned long long>(dropped));
  reporter.progress("score_ingest", note);
  reporter.report(Measure{"score_ingest", memcpy_rate > 0 ? ingest_rate / memcpy_rate : 0.0,
                          Figure{"ingest", ingest_rate / 1e9, "GB/s"},
                          Figure{"memcpy", memcpy_rate / 1e9, "GB/s"}, ">=0.5"});
  return {};
}

}  // namespace

void register_score_ingest(Registry& registry) {
  registry.add("score_ingest",
               "score records producer thread -> score ring -> consumer thread -> "
               "SequenceTiers::add_scores (2,000 tokens, 34 records/step) vs memcpy of the bytes",
               run);
}

}  // namespace kvtier::bench
