// shm_pingpong: round trip of one ScoreRecord between two processes over the real score rings
// vs a raw spin ping-pong on two shared atomics, measured interleaved in the same run.
//
// The score ring only runs client -> daemon, so the round trip uses two control segments with
// the roles swapped: on segment A the parent is the client (ScoreProducer) and the child the
// daemon (ScoreConsumer); on segment B the reverse. Both segments are created by the parent
// (Segment, as the daemon does) and the client side of each maps it with Mapping::map_segment
// over the segment's fd, as a real client would; the child maps B after fork(). Both sides spin
// (ScoreConsumer::pop in a loop, no doorbell), as does the raw baseline.
#include <cstdio>
#include <memory>
#include <span>
#include <string>

#include "harness.hpp"
#include "ipc_fixture.hpp"
#include "kvtier/shm/control_segment.hpp"

namespace kvtier::bench {
namespace {

constexpr std::uint32_t kScoreCapacity = 64;
constexpr std::uint32_t kPlanCapacity = 1;

// The sending side of one direction and the receiving side of the other.
struct EchoEnds {
  shm::ScoreProducer out;
  shm::ScoreConsumer in;
};

shm::ScoreRecord make_record() {
  shm::ScoreRecord record{};
  record.sequence = 1;
  record.count = shm::kScoresPerRecord;
  for (std::uint32_t i = 0; i < shm::kScoresPerRecord; ++i) {
    record.values[i] = 1.0f / static_cast<float>(i + 1);
  }
  return record;
}

// Spins until one record arrives; false on timeout or a ring error.
bool receive(shm::ScoreConsumer& in, shm::ScoreRecord& record, Clock::time_point deadline) {
  bool broken = false;
  const bool arrived = spin_until(
      [&] {
        auto popped = in.pop(std::span<shm::ScoreRecord>(&record, 1));
        if (!popped) broken = true;
        return broken || *popped == 1;
      },
      deadline);
  return arrived && !broken;
}

Status run(const RunConfig& config, Reporter& reporter) {
  auto seg_a = create_bench_control_segment("ping", 1, kScoreCapacity, kPlanCapacity);
  if (!seg_a) return tl::unexpected(seg_a.error());
  auto seg_b = create_bench_control_segment("pong", 2, kScoreCapacity, kPlanCapacity);
  if (!seg_b) return tl::unexpected(seg_b.error());

  // Parent: client of A (maps it like a client), daemon of B.
  auto map_a = shm::Mapping::map_segment(seg_a->segment.fd(), shm::SegmentKind::kControl, 1);
  if (!map_a) return tl::unexpected(map_a.error());
  auto client_a = shm::client_rings(*map_a);
  if (!client_a) return tl::unexpected(client_a.error());
  EchoEnds parent{client_a->scores, shm::daemon_rings(seg_b->segment, seg_b->layout).scores};

  shm::ScoreRecord record = make_record();
  const TripFn parent_trip = [&](std::uint64_t seq, Clock::time_point deadline) {
    record.step = static_cast<std::uint32_t>(seq);
    if (parent.out.push(record) == shm::PushResult::kDropped) return false;
    shm::ScoreRecord echo;
    return receive(parent.in, echo, deadline) && echo.step == record.step;
  };

  // Child: daemon of A, client of B (mapped here, after fork).
  const ChildSetup child_setup = [&]() -> Result<TripFn> {
    auto map_b = shm::Mapping::map_segment(seg_b->segment.fd(), shm::SegmentKind::kControl, 1);
    if (!map_b) return tl::unexpected(map_b.error());
    auto client_b = shm::client_rings(*map_b);
    if (!client_b) return tl::unexpected(client_b.error());
    auto mapping = std::make_shared<shm::Mapping>(std::move(*map_b));
    auto ends = std::make_shared<EchoEnds>(
        EchoEnds{client_b->scores, shm::daemon_rings(seg_a->segment, seg_a->layout).scores});
    return TripFn([mapping, ends](std::uint64_t seq, Clock::time_point deadline) {
      shm::ScoreRecord got;
      if (!receive(ends->in, got, deadline)) return false;
      if (got.step != static_cast<std::uint32_t>(seq)) return false;
      return ends->out.push(got) != shm::PushResult::kDropped;
    });
  };

  Schedule schedule;
  schedule.warmup_trips = config.quick ? 300 : 20000;
  schedule.rounds = config.quick ? 4 : 20;
  schedule.trips_per_block = config.quick ? 500 : 10000;
  auto samples = run_interleaved_pingpong(schedule, parent_trip, child_setup);
  if (!samples) return tl::unexpected(samples.error());

  const double ring_p50 = median(samples->subject_ns);
  const double raw_p50 = median(samples->raw_ns);
  char note[160];
  std::snprintf(note, sizeof(note), "%zu trips each; p99 ring=%.0fns raw=%.0fns",
                samples->raw_ns.size(), percentile(samples->subject_ns, 99),
                percentile(samples->raw_ns, 99));
  reporter.progress("shm_pingpong", note);
  reporter.report(Measure{"shm_pingpong", raw_p50 > 0 ? ring_p50 / raw_p50 : 0.0,
                          Figure{"ring_rtt_p50", ring_p50, "ns"},
                          Figure{"raw_rtt_p50", raw_p50, "ns"}, "<=2"});
  return {};
}

}  // namespace

void register_shm_pingpong(Registry& registry) {
  registry.add("shm_pingpong",
               "ScoreRecord round trip over two real score rings between two processes vs a raw "
               "shared-atomic spin ping-pong (p50)",
               run);
}

}  // namespace kvtier::bench
