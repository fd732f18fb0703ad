// plan_roundtrip: the daemon side (parent) publishes one plan epoch — a PlanRecord with 32
// moves and kPlanLast — through PlanProducer and spins on acked_epoch(); the client (a child
// process that maps the control segment like a real client) waits with PlanConsumer::wait (its
// real bounded spin, then futex), pops the record, reads its moves and acks the epoch.
// Baseline: the raw two-process spin ping-pong on two shared atomics, interleaved in the same
// run (goal C4 in research/perf-anchors.md §9; p50 and p99 over all timed trips).
#include <cstdio>
#include <memory>
#include <span>

#include "harness.hpp"
#include "ipc_fixture.hpp"
#include "kvtier/shm/control_segment.hpp"

namespace kvtier::bench {
namespace {

constexpr std::uint32_t kScoreCapacity = 1;
constexpr std::uint32_t kPlanCapacity = 8;
constexpr std::uint16_t kMovesPerPlan = 32;
constexpr auto kClientWait = std::chrono::seconds(10);

shm::PlanRecord make_plan() {
  shm::PlanRecord plan{};
  plan.sequence = 1;
  plan.move_count = kMovesPerPlan;
  plan.flags = shm::kPlanLast;
  for (std::uint16_t i = 0; i < kMovesPerPlan; ++i) {
    shm::PlanMove& move = plan.moves[i];
    move.position = 1000u + 3u * i;
    move.from_tier = shm::kTierHbm;
    move.to_tier = shm::kTierDdr;
    move.src_slot = shm::kNoSlot;
    move.dst_slot = 7u * i;
  }
  return plan;
}

// The client's side of one trip: wait, pop the epoch's record, "apply" it, ack.
bool client_trip(shm::PlanConsumer& plans, std::uint64_t epoch) {
  if (!plans.wait(kClientWait)) return false;
  shm::PlanRecord plan;
  auto popped = plans.pop(std::span<shm::PlanRecord>(&plan, 1));
  if (!popped || *popped != 1 || plan.epoch != epoch || (plan.flags & shm::kPlanLast) == 0) {
    return false;
  }
  std::uint64_t touched = 0;  // stands in for executing the copies
  for (std::uint16_t i = 0; i < plan.move_count; ++i) {
    touched += plan.moves[i].position ^ plan.moves[i].dst_slot;
  }
  do_not_optimize(touched);
  plans.ack(epoch);  // the daemon spins, so no doorbell to ring
  return true;
}

Status run(const RunConfig& config, Reporter& reporter) {
  auto bench_segment = create_bench_control_segment("plan", 3, kScoreCapacity, kPlanCapacity);
  if (!bench_segment) return tl::unexpected(bench_segment.error());
  const shm::Segment& segment = bench_segment->segment;
  shm::PlanProducer producer = shm::daemon_rings(segment, bench_segment->layout).plans;

  shm::PlanRecord plan = make_plan();
  bool protocol_error = false;
  const TripFn daemon_trip = [&](std::uint64_t epoch, Clock::time_point deadline) {
    plan.epoch = epoch;
    if (!producer.push(plan)) return false;
    return spin_until(
               [&] {
                 auto acked = producer.acked_epoch();
                 if (!acked) protocol_error = true;
                 return protocol_error || *acked == epoch;
               },
               deadline) &&
           !protocol_error;
  };

  const ChildSetup client_setup = [&]() -> Result<TripFn> {
    auto mapping = shm::Mapping::map_segment(segment.fd(), shm::SegmentKind::kControl, 1);
    if (!mapping) return tl::unexpected(mapping.error());
    auto rings = shm::client_rings(*mapping);
    if (!rings) return tl::unexpected(rings.error());
    auto owned = std::make_shared<shm::Mapping>(std::move(*mapping));
    auto plans = std::make_shared<shm::PlanConsumer>(rings->plans);
    return TripFn([owned, plans](std::uint64_t epoch, Clock::time_point) {
      return client_trip(*plans, epoch);
    });
  };

  Schedule schedule;
  schedule.warmup_trips = config.quick ? 300 : 20000;
  schedule.rounds = config.quick ? 4 : 20;
  schedule.trips_per_block = config.quick ? 500 : 10000;
  auto samples = run_interleaved_pingpong(schedule, daemon_trip, client_setup);
  if (!samples) return tl::unexpected(samples.error());

  const double plan_p50 = median(samples->subject_ns);
  const double raw_p50 = median(samples->raw_ns);
  const double plan_p99 = percentile(samples->subject_ns, 99);
  const double raw_p99 = percentile(samples->raw_ns, 99);
  char note[128];
  std::snprintf(note, sizeof(note), "%zu trips each, %u moves per plan", samples->raw_ns.size(),
                unsigned{kMovesPerPlan});
  reporter.progress("plan_roundtrip", note);
  reporter.report(Measure{"plan_roundtrip_p50", raw_p50 > 0 ? plan_p50 / raw_p50 : 0.0,
                          Figure{"plan_rtt_p50", plan_p50, "ns"},
                          Figure{"raw_rtt_p50", raw_p50, "ns"}, "<=2"});
  reporter.report(Measure{"plan_roundtrip_p99", raw_p99 > 0 ? plan_p99 / raw_p99 : 0.0,
                          Figure{"plan_rtt_p99", plan_p99, "ns"},
                          Figure{"raw_rtt_p99", raw_p99, "ns"}, "<=3"});
  return {};
}

}  // namespace

void register_plan_roundtrip(Registry& registry) {
  registry.add("plan_roundtrip",
               "plan epoch (32 moves) daemon -> client over the real plan ring, client waits "
               "(spin, then futex), acks; vs the raw spin ping-pong (p50, p99)",
               run);
}

}  // namespace kvtier::bench
