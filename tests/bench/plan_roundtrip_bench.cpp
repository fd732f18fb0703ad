// plan_roundtrip: the daemon side (parent) publishes one plan epoch — a PlanRecord with 32
// moves and kPlanLast — through PlanProducer and spins on pop_acks(); the client (a child
// process that maps the control segment like a real client) waits with PlanConsumer::wait (its
// real bounded spin, then futex), pops the record, reads its moves and acks the epoch.
// Baseline: the raw two-process spin ping-pong on two shared atomics, interleaved in the same
// run (goal C4 in research/perf-anchors.md §9; p50 and p99 over all timed trips).
//
// Then the same schedule (shorter) again under a fixed background load started by the benchmark
// itself (BackgroundLoad: one busy-spinning process per online CPU), so a run reports the idle
// and the loaded tail side by side: `plan_roundtrip_p99_loaded_vs_idle` is the loaded plan p99
// over the idle plan p99 of the same run. The loaded raw figures go to the progress line only:
// the spin baseline never sleeps, so it says little about a path that does.
//
// Floor (plan_roundtrip_floor, what the p50 goal is up against): the raw spin ping-pong made to
// carry what a plan trip must carry, in a third interleaved phase of the same run: the parent
// writes the plan (the record's header and its 32 moves, not the unused rest of the 1 KiB
// record) into a shared page before its ping, the child copies it out and reads its moves
// before its pong. Those lines cross to the child's core only after the ping is seen, so a trip
// waits for at least three line transfers in turn (ping, plan, pong) where the bare ping-pong
// waits for two; plan_roundtrip_vs_floor is the real ring over that floor.
#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <cstdio>
#include <memory>
#include <span>
#include <string_view>

#include "background_load.hpp"
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

// Reads every move of `plan`: stands in for executing the copies.
void read_moves(const shm::PlanRecord& plan) {
  std::uint64_t touched = 0;
  for (std::uint16_t i = 0; i < plan.move_count; ++i) touched += plan.moves[i].position ^ plan.moves[i].dst_slot;
  do_not_optimize(touched);
}

// The client's side of one trip: wait, pop the epoch's record, "apply" it, ack.
bool client_trip(shm::PlanConsumer& plans, std::uint64_t epoch) {
  if (!plans.wait(kClientWait)) return false;
  shm::PlanRecord plan;
  auto popped = plans.pop(std::span<shm::PlanRecord>(&plan, 1));
  if (!popped || *popped != 1 || plan.epoch != epoch || (plan.flags & shm::kPlanLast) == 0) {
    return false;
  }
  read_moves(plan);
  plans.ack(epoch);  // the daemon spins, so no doorbell to ring
  return true;
}

// The bytes of make_plan()'s record that carry anything: the header and kMovesPerPlan moves.
constexpr std::size_t kPlanBytes = offsetof(shm::PlanRecord, moves) + kMovesPerPlan * sizeof(shm::PlanMove);

// The floor's shared page: the record, then the two counters on lines of their own.
struct FloorPage {
  shm::PlanRecord record;
  alignas(64) std::atomic<std::uint64_t> ping{0};
  alignas(64) std::atomic<std::uint64_t> pong{0};
};

// The floor phase (see the top of the file): subject = record-carrying ping-pong.
Result<PingPongSamples> measure_floor(const Schedule& schedule) {
  void* mapped = mmap(nullptr, sizeof(FloorPage), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return make_error(Errc::kInternal, "plan_roundtrip: mmap of the floor page failed");
  auto* page = new (mapped) FloorPage;
  shm::PlanRecord plan = make_plan();
  const TripFn parent_trip = [&](std::uint64_t seq, Clock::time_point deadline) {
    plan.epoch = seq;
    std::memcpy(&page->record, &plan, kPlanBytes);
    page->ping.store(seq, std::memory_order_release);
    return spin_until([&] { return page->pong.load(std::memory_order_acquire) == seq; }, deadline);
  };
  const ChildSetup child_setup = [page]() -> Result<TripFn> {
    return TripFn([page](std::uint64_t seq, Clock::time_point deadline) {
      if (!spin_until([&] { return page->ping.load(std::memory_order_acquire) == seq; }, deadline)) return false;
      shm::PlanRecord copy;
      std::memcpy(&copy, &page->record, kPlanBytes);
      read_moves(copy);
      page->pong.store(seq, std::memory_order_release);
      return copy.epoch == seq;
    });
  };
  auto samples = run_interleaved_pingpong(schedule, parent_trip, child_setup);
  munmap(mapped, sizeof(FloorPage));
  return samples;
}

// One phase on its own fresh segment (`tag` names it), so each phase's epochs start at 1.
Result<PingPongSamples> measure_phase(std::string_view tag, const Schedule& schedule) {
  auto bench_segment = create_bench_control_segment(tag, 3, kScoreCapacity, kPlanCapacity);
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
                 shm::PlanAck ack{};
                 auto popped = producer.pop_acks(std::span(&ack, 1));
                 if (!popped || (*popped == 1 && ack.epoch != epoch)) protocol_error = true;
                 return protocol_error || (popped && *popped == 1);
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

  return run_interleaved_pingpong(schedule, daemon_trip, client_setup);
}

Status run(const RunConfig& config, Reporter& reporter) {
  Schedule schedule;
  schedule.warmup_trips = config.quick ? 300 : 20000;
  schedule.rounds = config.quick ? 4 : 20;
  schedule.trips_per_block = config.quick ? 500 : 10000;
  auto samples = measure_phase("plan", schedule);
  if (!samples) return tl::unexpected(samples.error());
  auto floor = measure_floor(schedule);
  if (!floor) return tl::unexpected(floor.error());

  // Fewer loaded trips: when the two sides share a CPU with the load, a raw spin trip can wait
  // for a whole scheduler slice, and the fixture gives the whole schedule 60 s.
  Schedule loaded_schedule;
  loaded_schedule.warmup_trips = config.quick ? 300 : 2000;
  loaded_schedule.rounds = config.quick ? 4 : 10;
  loaded_schedule.trips_per_block = config.quick ? 250 : 2000;
  const unsigned load_processes = default_load_processes();
  auto load = BackgroundLoad::start(load_processes);
  if (!load) return tl::unexpected(load.error());
  auto loaded = measure_phase("plan_loaded", loaded_schedule);
  if (auto stopped = load->stop(); !stopped) return stopped;
  if (!loaded) return tl::unexpected(loaded.error());

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
  // The floor against its own phase's bare ping-pong, and the plan p50 against the floor.
  const double floor_p50 = median(floor->subject_ns);
  const double floor_raw_p50 = median(floor->raw_ns);
  reporter.report(Measure{"plan_roundtrip_floor", floor_raw_p50 > 0 ? floor_p50 / floor_raw_p50 : 0.0,
                          Figure{"floor_rtt_p50", floor_p50, "ns"}, Figure{"raw_rtt_p50", floor_raw_p50, "ns"},
                          "bound"});
  reporter.report(Measure{"plan_roundtrip_vs_floor", floor_p50 > 0 ? plan_p50 / floor_p50 : 0.0,
                          Figure{"plan_rtt_p50", plan_p50, "ns"}, Figure{"floor_rtt_p50", floor_p50, "ns"},
                          "bound"});

  const double loaded_p50 = median(loaded->subject_ns);
  const double loaded_p99 = percentile(loaded->subject_ns, 99);
  char loaded_note[256];
  std::snprintf(loaded_note, sizeof(loaded_note),
                "loaded (%u spinners, %zu trips each): plan p50=%.0fns p99=%.0fns, raw p50=%.0fns "
                "p99=%.0fns; idle plan p50=%.0fns p99=%.0fns",
                load_processes, loaded->subject_ns.size(), loaded_p50, loaded_p99,
                median(loaded->raw_ns), percentile(loaded->raw_ns, 99), plan_p50, plan_p99);
  reporter.progress("plan_roundtrip", loaded_note);
  reporter.report(Measure{"plan_roundtrip_p99_loaded_vs_idle",
                          plan_p99 > 0 ? loaded_p99 / plan_p99 : 0.0,
                          Figure{"plan_rtt_p99_loaded", loaded_p99, "ns"},
                          Figure{"plan_rtt_p99_idle", plan_p99, "ns"}, "<=3"});
  return {};
}

}  // namespace

void register_plan_roundtrip(Registry& registry) {
  registry.add("plan_roundtrip",
               "plan epoch (32 moves) daemon -> client over the real plan ring, client waits "
               "(spin, then futex), acks; vs the raw spin ping-pong (p50, p99); p99 again under a "
               "background load of one spinner per CPU, vs idle",
               run);
}

}  // namespace kvtier::bench
