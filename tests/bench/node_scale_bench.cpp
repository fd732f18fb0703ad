// node_scale: the daemon's CPU at node scale. A real kvtierd (child process, its own runtime
// directory and shm prefix) and N real libkvtier clients (connections over its socket, their
// own control segments) with S sequences of T tokens each, driven at 50 decode steps per second
// by a light load generator: synthetic scores, no model, no KV copies (plans are acknowledged
// as applied without executing them; T3 moves need no pool rows, so the pools are 64 rows).
//
// Per decision (the default): each sequence's interval sums are pushed as a device-accumulating
// engine pushes them (kvtier_score_sums_push in the interval's last step; the library ships them
// with that step's end). Per step (the baseline, KVTIER_SHIP_PER_STEP): every step pushes every
// token's score and kvtierd accumulates. Sequences start their steps staggered over one interval,
// as requests arrive in a real engine, so decisions spread over the steps.
//
// Figures per size: kvtierd's CPU time per wall second (all its threads, /proc/<pid>/task/*/
// schedstat, in cores), the share of decisions whose plan arrived within one interval of their step, and the
// score bytes that crossed shared memory per step (records pushed x 256 B). The headline is
// `ratio node_scale_cpu` at 16M tokens against 0.10 of a core (goal <= 1).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_daemon.hpp"
#include "harness.hpp"
#include "kvtier/kvtier.h"
#include "kvtier/shm/records.hpp"

namespace kvtier::bench {
namespace {

constexpr std::uint32_t kInterval = 64;
constexpr double kStepsPerSecond = 50.0;
constexpr double kCoreBudget = 0.10;
constexpr std::uint32_t kPrompt = 16;

struct Size {
  const char* label;
  std::uint32_t clients, sequences, tokens;
};

struct Outcome {
  double cpu_cores = 0.0;       // kvtierd CPU seconds per wall second
  double on_time = 0.0;         // decisions published within one interval / decisions due
  double bytes_per_step = 0.0;  // score bytes pushed into shm per step, all clients
  double steps_per_second = 0.0;
  std::uint64_t decisions = 0;
};

// CPU time of every thread of the process: the first field of /proc/<pid>/task/<tid>/schedstat
// (nanoseconds on a CPU), summed; utime/stime of /proc/<pid>/stat count 10 ms ticks, too coarse
// for a daemon that should be idle most of the time.
double daemon_cpu_seconds(pid_t pid) {
  double seconds = 0.0;
  std::error_code error;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", error)) {
    std::ifstream stat(task.path() / "schedstat");
    double ns = 0.0;
    if (stat >> ns) seconds += ns * 1e-9;
  }
  return seconds;
}

struct Seq {
  std::uint32_t id = 0;
  std::uint32_t offset = 0;  // bench step of its first decode step (staggered start)
  std::int64_t due_at = -1;  // bench step of its last decision not yet answered by a plan
};

struct Client {
  kvtier_client* handle = nullptr;
  std::vector<Seq> seqs;
  Client() = default;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client() { kvtier_client_free(handle); }
};

Result<Outcome> run_size(const Size& size, bool per_step, std::uint32_t measured_steps) {
  auto daemon = BenchDaemon::start(std::string(size.label) + (per_step ? "s" : "d"), {"limits.score_ring_records=65536"});
  if (!daemon) return tl::unexpected(daemon.error());
  std::vector<Client> clients(size.clients);
  const std::vector<float> scores(size.tokens + 2 * kInterval + measured_steps + 8, 1.0f / 1024.0f);
  std::uint32_t n = 0;
  for (Client& c : clients) {
    // T3 moves only: no row is ever needed.
    if (auto ok = daemon->connect_engine(64, &c.handle); !ok) return tl::unexpected(ok.error());
    for (std::uint32_t s = 0; s < size.sequences; ++s, ++n) {
      kvtier_sequence_options o;
      kvtier_sequence_options_init(&o);
      o.use_defaults = 0;
      o.prompt_length = kPrompt;  // the rest of the T tokens arrive with the first scores: managed
      o.interval = kInterval;
      o.hbm_ratio = 1.0;
      o.evict_ratio = 0.001;  // ~32 T3 moves per decision of a 32K sequence: every decision is a plan
      o.mode = KVTIER_EVICT_PAPER_ALGORITHM;
      o.score_shipping = per_step ? KVTIER_SHIP_PER_STEP : KVTIER_SHIP_PER_DECISION;
      Seq seq;
      if (auto ok = check(kvtier_sequence_open_with(c.handle, &o, &seq.id), c.handle, "open"); !ok) return tl::unexpected(ok.error());
      seq.offset = n % kInterval;
      c.seqs.push_back(seq);
    }
  }
  const std::uint32_t warmup = 2 * kInterval;
  const std::uint32_t total = warmup + measured_steps;
  double cpu_start = 0.0;
  std::uint64_t pushed_start = 0;
  std::uint64_t due = 0, on_time = 0;
  Clock::time_point measure_start;
  const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / kStepsPerSecond));
  auto next = Clock::now();
  const auto pushed_now = [&] {
    std::uint64_t sum = 0;
    for (Client& c : clients) {
      kvtier_client_counters counters;
      counters.struct_size = sizeof(counters);
      kvtier_client_counters_get(c.handle, &counters);
      sum += counters.score_records_pushed;
    }
    return sum;
  };
  for (std::uint32_t k = 0; k < total; ++k) {
    if (k == warmup) {
      cpu_start = daemon_cpu_seconds(daemon->pid());
      pushed_start = pushed_now();
      measure_start = Clock::now();
    }
    for (Client& c : clients) {
      for (Seq& s : c.seqs) {
        if (k < s.offset) continue;
        const std::uint32_t step = k - s.offset;
        const std::uint32_t length = size.tokens + step;  // one new token per step
        if (per_step) {
          (void)kvtier_scores_push(c.handle, s.id, step, 0, scores.data(), length);
        } else {
          int completes = 0;
          (void)kvtier_sequence_completes_interval(c.handle, s.id, &completes);
          if (completes) {
            (void)kvtier_score_sums_push(c.handle, s.id, KVTIER_SCORE_SUM_ATTENTION, 0, scores.data(), length);
          }
        }
        (void)kvtier_sequence_step_end(c.handle, s.id, step);
        if ((step + 1) % kInterval == 0) {
          if (s.due_at >= static_cast<std::int64_t>(warmup)) ++due;  // the previous one never got its plan
          s.due_at = k;
        }
      }
      kvtier_plan plan;
      while (kvtier_plan_poll(c.handle, 0, &plan) == KVTIER_OK) {
        for (Seq& s : c.seqs) {
          if (s.id != plan.sequence || s.due_at < 0) continue;
          if (s.due_at >= static_cast<std::int64_t>(warmup)) {
            ++due;
            if (static_cast<std::int64_t>(k) - s.due_at <= kInterval) ++on_time;
          }
          s.due_at = -1;
        }
        (void)kvtier_plan_ack(c.handle, plan.epoch, 1);
      }
    }
    next += period;
    std::this_thread::sleep_until(next);
  }
  const double wall = seconds_between(measure_start, Clock::now());
  Outcome out;
  out.cpu_cores = (daemon_cpu_seconds(daemon->pid()) - cpu_start) / wall;
  out.bytes_per_step = static_cast<double>(pushed_now() - pushed_start) * sizeof(shm::ScoreRecord) / measured_steps;
  out.steps_per_second = measured_steps / wall;
  out.decisions = due;
  out.on_time = due == 0 ? 0.0 : static_cast<double>(on_time) / static_cast<double>(due);
  return out;
}

Status run(const RunConfig& config, Reporter& reporter) {
  const std::vector<Size> sizes = config.quick ? std::vector<Size>{{"256k", 2, 4, 32768}}
                                               : std::vector<Size>{{"1m", 8, 4, 32768},
                                                                   {"4m", 8, 16, 32768},
                                                                   {"16m", 8, 64, 32768}};
  const std::uint32_t measured = config.quick ? 64 : 4 * kInterval;
  std::vector<Outcome> decision;
  for (const Size& size : sizes) {
    auto out = run_size(size, false, measured);
    if (!out) return tl::unexpected(out.error());
    decision.push_back(*out);
    reporter.progress("node_scale", std::string(size.label) + " per decision: " + std::to_string(out->cpu_cores) +
                                        " cores, " + std::to_string(out->steps_per_second) + " steps/s, " +
                                        std::to_string(out->decisions) + " decisions");
    const std::string tag = std::string("node_scale_cpu") + (&size == &sizes.back() ? "" : std::string("_") + size.label);
    reporter.report({tag, out->cpu_cores / kCoreBudget, {"kvtierd_cpu_" + std::string(size.label), out->cpu_cores, "cores"},
                     {"budget", kCoreBudget, "cores"}, "<=1"});
    reporter.report({"node_scale_on_time_" + std::string(size.label), out->on_time,
                     {"decisions_within_one_interval", out->on_time * static_cast<double>(out->decisions), ""},
                     {"decisions", static_cast<double>(out->decisions), ""}, ">=1"});
    // Against the bare per-step score floats (4 B per token per step, no record overhead).
    const double per_step_bytes = static_cast<double>(size.clients) * size.sequences * size.tokens * 4.0;
    reporter.report({"node_scale_shm_bytes_" + std::string(size.label), out->bytes_per_step / per_step_bytes,
                     {"score_bytes_per_step", out->bytes_per_step, "B"}, {"per_step_score_bytes", per_step_bytes, "B"},
                     "<=0.05"});
  }
  if (decision.size() > 1) {
    reporter.report({"node_scale_cpu_growth", decision.back().cpu_cores / decision.front().cpu_cores,
                     {"cpu_" + std::string(sizes.back().label), decision.back().cpu_cores, "cores"},
                     {"cpu_" + std::string(sizes.front().label), decision.front().cpu_cores, "cores"}, "<=16"});
  }
  // The per-step path as the baseline, at the smallest size only: above it one core cannot keep up.
  auto baseline = run_size(sizes.front(), true, config.quick ? 64 : 2 * kInterval);
  if (!baseline) return tl::unexpected(baseline.error());
  reporter.report({"node_scale_per_step_cpu_" + std::string(sizes.front().label), baseline->cpu_cores / kCoreBudget,
                   {"kvtierd_cpu_per_step", baseline->cpu_cores, "cores"}, {"budget", kCoreBudget, "cores"}, "<=1"});
  reporter.report({"node_scale_speedup_" + std::string(sizes.front().label),
                   decision.front().cpu_cores > 0 ? baseline->cpu_cores / decision.front().cpu_cores : 0.0,
                   {"kvtierd_cpu_per_step", baseline->cpu_cores, "cores"},
                   {"kvtierd_cpu_per_decision", decision.front().cpu_cores, "cores"}, ">=10"});
  reporter.progress("node_scale", "per step: " + std::to_string(baseline->steps_per_second) + " steps/s, on time " +
                                      std::to_string(baseline->on_time));
  return {};
}

}  // namespace

void register_node_scale(Registry& registry) {
  registry.add("node_scale",
               "real kvtierd + N clients x S sequences x T tokens at 50 steps/s: daemon CPU, decisions on time, shm bytes",
               run);
}

}  // namespace kvtier::bench
