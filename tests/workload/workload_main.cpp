// kvtier-workload: a real engine client. Connects to kvtierd, registers the KV geometry of a
// small transformer (tests/support ToyModel), opens a few sequences and runs a decode loop:
// every step it executes the plans the daemon sent (offload/restore copies through libkvtier),
// decodes one token per sequence with attention over T0 plus the staged T1 rows, pushes the
// token's attention scores and ends the step. A shadow model with the full cache measures how far
// the tiered outputs are from the untiered ones; a KV audit (kv_audit.hpp, every --audit-every
// steps, also with --no-shadow) checks that every row the engine attends to is the row it wrote:
// T0/T1 bit-identical, T2 within the int8 bound, and that no live token is missing.
//
// --backend cpu (default): the engine's KV cache is host memory and libkvtier's CPU executor
// moves the rows. --backend cuda: the cache and the staging buffer are device memory (DeviceCache)
// and every row moves through libkvtier's CUDA executor; the toy still computes on the CPU over a
// host mirror. T2 rows (--int8-pool-tokens) work on both: on CUDA libkvtier dequantizes them on
// the GPU, into the device staging buffer or (T2 -> T0) the device cache.
// --probe checks the backend and exits (0 usable, 4 not) without a daemon.
//
// Lockstep by default: after every step end and every acknowledgement the workload waits until
// kvtierd has consumed what it published (kvtier_client_sync), so one client's plans arrive at
// the same steps on every run and a test may assert what they did. --free-running skips the
// waits (plans then land whenever the daemon gets to them). With --hold it prints
// `holding name=N` once its last step and acknowledgement are resolved, then waits for SIGTERM.
// --pause-every N prints `paused step=S` after every Nth step and waits for SIGUSR1, so a test
// can look at the daemon at known steps. --pipeline polls every plan on the ring before it
// applies any, then applies and acknowledges them newest first (plans of different sequences
// in flight together, acknowledged out of order); the summary's max_in_flight says how many
// plans it held unacknowledged at once.
//
// Prints one `summary key=value ...` line. Exit: 0 ok, 1 failed, 2 usage, 3 daemon unreachable,
// 4 --backend cuda without a usable CUDA device or CUDA build ("no CUDA device: ..."),
// 5 --expect-exact and an output differed from the full cache, 6 the KV audit found a violation
// (a T0/T1 row not exact, a T2 row beyond the int8 bound, a lost token, a tier the plans
// contradict); the first few are described on stderr.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend_probe.hpp"
#include "kvtier/kvtier.hpp"
#include "toy_engine.hpp"

namespace {

volatile std::sig_atomic_t g_stop = 0;
volatile std::sig_atomic_t g_resumed = 0;  // SIGUSR1s received (--pause-every)

struct Options {
  std::string socket;
  std::string name = "workload";
  unsigned sequences = 3, prompt = 48, steps = 256, step_us = 0;
  unsigned fail_every = 0;  // acknowledge every Nth plan as failed without executing it
  unsigned pool_tokens = 0;  // DDR pool rows to ask for; 0 = room for every token
  unsigned int8_pool_tokens = 0;  // int8 (T2) pool rows to ask for; 0 = no T2
  unsigned weight = 0;            // share of the node DDR budget; 0 = the daemon's default
  unsigned audit_every = 1;       // audit the KV every Nth step; 0 = never
  unsigned pause_every = 0;       // after every Nth step: print `paused step=S`, wait for SIGUSR1
  bool hold = false, shadow = true, expect_exact = false, probe = false, free_running = false, pipeline = false;
  kvtier_backend backend = KVTIER_BACKEND_CPU;
  kvtier_sequence_options tiering{};
  kvtier_staging_order order = KVTIER_STAGE_POSITION_ORDER;
};

int fail(const kvtier::Client& client, const char* what, kvtier_status status) {
  std::fprintf(stderr, "kvtier-workload: %s: %s: %s\n", what, kvtier_status_string(status),
               client ? client.last_error().c_str() : kvtier_client_last_error(nullptr));
  return status == KVTIER_E_UNAVAILABLE ? 3 : 1;
}

bool parse(int argc, char** argv, Options& o) {
  kvtier_sequence_options_init(&o.tiering);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--hold") { o.hold = true; continue; }
    if (arg == "--no-shadow") { o.shadow = false; continue; }
    if (arg == "--expect-exact") { o.expect_exact = true; continue; }
    if (arg == "--probe") { o.probe = true; continue; }
    if (arg == "--free-running") { o.free_running = true; continue; }
    if (arg == "--pipeline") { o.pipeline = true; continue; }
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    const auto u = [v] { return static_cast<unsigned>(std::strtoul(v, nullptr, 10)); };
    if (arg == "--socket") o.socket = v;
    else if (arg == "--name") o.name = v;
    else if (arg == "--sequences") o.sequences = u();
    else if (arg == "--prompt") o.prompt = u();
    else if (arg == "--steps") o.steps = u();
    else if (arg == "--step-us") o.step_us = u();
    else if (arg == "--fail-every") o.fail_every = u();
    else if (arg == "--pool-tokens") o.pool_tokens = u();
    else if (arg == "--int8-pool-tokens") o.int8_pool_tokens = u();
    else if (arg == "--weight") o.weight = u();
    else if (arg == "--audit-every") o.audit_every = u();
    else if (arg == "--pause-every") o.pause_every = u();
    else if (arg == "--backend") {
      if (std::strcmp(v, "cpu") != 0 && std::strcmp(v, "cuda") != 0) return false;
      o.backend = std::strcmp(v, "cuda") == 0 ? KVTIER_BACKEND_CUDA : KVTIER_BACKEND_CPU;
    }
    else if (arg == "--order") o.order = std::strcmp(v, "compact") == 0 ? KVTIER_STAGE_COMPACT : KVTIER_STAGE_POSITION_ORDER;
    else {
      // Tier parameters: any of them switches the sequence off the daemon's defaults.
      o.tiering.use_defaults = 0;
      if (arg == "--beta") o.tiering.hbm_ratio = std::strtod(v, nullptr);
      else if (arg == "--evict") o.tiering.evict_ratio = std::strtod(v, nullptr);
      else if (arg == "--interval") o.tiering.interval = u();
      else if (arg == "--window") o.tiering.window_tokens = u();
      else if (arg == "--sinks") o.tiering.sink_tokens = u();
      else if (arg == "--int8-ratio") o.tiering.int8_ratio = std::strtod(v, nullptr);
      else if (arg == "--int8-tokens") o.tiering.int8_tokens = u();
      else if (arg == "--policy") {
        static const char* const kNames[] = {"paper", "h2o", "streaming_llm", "random", "vase", "r_kv"};
        bool known = false;
        for (int k = 0; k < 6; ++k) {
          if (std::strcmp(v, kNames[k]) == 0) {
            o.tiering.policy = static_cast<kvtier_policy>(k);
            known = true;
          }
        }
        if (!known) return false;
      }
      else if (arg == "--mode") {
        o.tiering.mode = std::strcmp(v, "paper-algorithm") == 0   ? KVTIER_EVICT_PAPER_ALGORITHM
                         : std::strcmp(v, "paper-prototype") == 0 ? KVTIER_EVICT_PAPER_PROTOTYPE
                                                                  : KVTIER_EVICT_CUMULATIVE;
      } else return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fputs("usage: kvtier-workload [--socket PATH] [--name N] [--sequences K] [--prompt P] [--steps S]\n"
               "  [--step-us U] [--hold] [--free-running] [--pipeline] [--no-shadow] [--expect-exact]\n"
               "  [--order position|compact]\n"
               "  [--backend cpu|cuda] [--probe]\n"
               "  [--fail-every N] [--pool-tokens N] [--int8-pool-tokens N] [--weight W] [--audit-every N]\n"
               "  [--pause-every N]\n"
               "  [--beta B] [--evict R] [--mode cumulative|paper-algorithm|paper-prototype]\n"
               "  [--interval D] [--window W] [--sinks K] [--int8-ratio R] [--int8-tokens N]\n"
               "  [--policy paper|h2o|streaming_llm|random|vase|r_kv]\n",
               stderr);
    return 2;
  }
  if (const auto stop = kvtier::workload::check_backend("kvtier-workload", o.backend, o.probe)) return *stop;
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::signal(SIGUSR1, [](int) { g_resumed = g_resumed + 1; });

  kvtier::toy::ToyConfig config;
  config.num_layers = 4;
  config.num_q_heads = 4;
  config.num_kv_heads = 2;
  config.head_dim = 16;
  config.max_slots = o.prompt + o.steps;

  kvtier::Client client;
  kvtier_status st = client.connect(o.socket, o.name);
  if (st != KVTIER_OK) return fail(client, "connect", st);
  kvtier_model_geometry geometry;
  kvtier_model_geometry_init(&geometry);
  geometry.num_layers = config.num_layers;
  geometry.num_kv_heads = config.num_kv_heads;
  geometry.head_dim = config.head_dim;
  geometry.dtype = KVTIER_DTYPE_F32;
  geometry.model_name = "toy-4L-gqa";
  geometry.pool_tokens = o.pool_tokens != 0 ? o.pool_tokens : o.sequences * (o.prompt + o.steps);
  geometry.int8_pool_tokens = o.int8_pool_tokens;
  geometry.weight = o.weight;
  st = kvtier_model_register(client.get(), &geometry);
  if (st != KVTIER_OK) return fail(client, "register", st);

  // Shared by every engine of this client (the int8 pool is per client); outlives them.
  kvtier::workload::KeyRanges key_ranges(config.num_layers, config.num_kv_heads, config.head_dim);

  std::vector<std::unique_ptr<kvtier::workload::ToyEngine>> engines;
  for (unsigned i = 0; i < o.sequences; ++i) {
    kvtier_sequence_options options = o.tiering;
    options.prompt_length = o.prompt;
    options.key_digest_dim = config.head_dim;
    std::uint32_t id = 0;
    if ((st = client.open_sequence(options, id)) != KVTIER_OK) return fail(client, "open", st);
    engines.push_back(std::make_unique<kvtier::workload::ToyEngine>(
        client, id, config, 1000 + i, o.order, o.shadow, o.audit_every != 0 ? &key_ranges : nullptr, o.audit_every,
        o.tiering.policy, o.backend));
    if ((st = engines.back()->start(o.prompt)) != KVTIER_OK) return fail(client, "start", st);
  }
  auto engine_of = [&](std::uint32_t sequence) -> kvtier::workload::ToyEngine* {
    for (auto& e : engines) {
      if (e->sequence() == sequence) return e.get();
    }
    return nullptr;
  };

  // Lockstep (the default): sync after every step end and every acknowledgement, so the daemon
  // has decided from exactly what this process published before the next poll, and a plan shows
  // up at the same step on every run however loaded the machine is (kvtier_client_sync).
  auto settle = [&]() -> kvtier_status {
    return o.free_running ? KVTIER_OK : client.sync(std::chrono::seconds(60));
  };
  if ((st = settle()) != KVTIER_OK) return fail(client, "sync", st);
  unsigned plans_seen = 0, plans_rejected = 0;
  std::size_t max_in_flight = 0;
  std::vector<kvtier_plan> held;
  for (unsigned step = 0; step < o.steps && g_stop == 0; ++step) {
    kvtier_plan plan{};
    for (;;) {
      held.clear();
      while ((o.pipeline || held.empty()) && (st = client.poll_plan(std::chrono::milliseconds(0), plan)) == KVTIER_OK) {
        held.push_back(plan);
      }
      if (held.empty()) break;
      max_in_flight = std::max(max_in_flight, held.size());
      for (auto it = held.rbegin(); it != held.rend(); ++it) {
        kvtier_status done = KVTIER_OK;
        if (o.fail_every != 0 && ++plans_seen % o.fail_every == 0) {
          // Report the plan as not applied: the daemon must keep the old placement.
          if ((done = client.ack_plan(it->epoch, false)) != KVTIER_OK) return fail(client, "ack", done);
          ++plans_rejected;
        } else {
          auto* engine = engine_of(it->sequence);
          if (engine == nullptr) return fail(client, "plan for an unknown sequence", KVTIER_E_PROTOCOL);
          if ((done = engine->apply(*it)) != KVTIER_OK) return fail(client, "apply", done);
        }
      }
      if (kvtier_status settled = settle(); settled != KVTIER_OK) return fail(client, "sync", settled);
    }
    if (st != KVTIER_E_TIMEOUT) return fail(client, "poll", st);
    for (auto& engine : engines) {
      if ((st = engine->step()) != KVTIER_OK) return fail(client, "step", st);
    }
    if ((st = settle()) != KVTIER_OK) return fail(client, "sync", st);
    if (o.step_us != 0) std::this_thread::sleep_for(std::chrono::microseconds(o.step_us));
    if (o.pause_every != 0 && (step + 1) % o.pause_every == 0 && step + 1 < o.steps) {
      // A test looks at the daemon now: this step and its decision are resolved (lockstep).
      const std::sig_atomic_t resumed = g_resumed;
      std::printf("paused step=%u\n", step + 1);
      std::fflush(stdout);
      while (g_resumed == resumed && g_stop == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  if (o.hold) {
    // Every acknowledgement above has been resolved by the daemon (sync), so from here its
    // counters for this client match this process's: plans sent from now on are never applied.
    if ((st = client.sync(std::chrono::seconds(60))) != KVTIER_OK) return fail(client, "sync", st);
    std::printf("holding name=%s\n", o.name.c_str());
    std::fflush(stdout);
  }
  while (o.hold && g_stop == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));

  kvtier::workload::EngineStats total;
  kvtier::workload::AuditStats audit;
  std::uint64_t lost_tokens = 0;
  for (auto& engine : engines) {
    const auto& s = engine->stats();
    total.plans += s.plans;
    total.plans_failed += s.plans_failed;
    total.rows_offloaded += s.rows_offloaded;
    total.rows_restored += s.rows_restored;
    total.rows_to_t2 += s.rows_to_t2;
    total.rows_restored_t2 += s.rows_restored_t2;
    total.t3_tokens += s.t3_tokens;
    total.rows_t2_evicted += s.rows_t2_evicted;
    audit.tier_mismatch += s.plan_tier_mismatch;
    if (s.plan_tier_mismatch != 0) {
      std::fprintf(stderr, "kvtier-workload: audit: sequence %u: %llu moves from a tier the token was not in\n",
                   engine->sequence(), static_cast<unsigned long long>(s.plan_tier_mismatch));
    }
    if (const auto* a = engine->audit()) {
      const auto& as = a->stats();
      audit.steps += as.steps;
      audit.rows += as.rows;
      audit.exact_mismatch += as.exact_mismatch;
      audit.t2_rows += as.t2_rows;
      audit.t2_bound_violations += as.t2_bound_violations;
      audit.tier_mismatch += as.tier_mismatch;
      audit.t2_max_abs_err = std::max(audit.t2_max_abs_err, as.t2_max_abs_err);
      lost_tokens += as.lost.size();
      for (const auto& note : a->notes()) {
        std::fprintf(stderr, "kvtier-workload: audit: sequence %u: %s\n", engine->sequence(), note.c_str());
      }
    }
    total.steps_compared += s.steps_compared;
    total.steps_identical += s.steps_identical;
    total.max_abs_diff = std::max(total.max_abs_diff, s.max_abs_diff);
    total.peak_t0 = std::max(total.peak_t0, s.peak_t0);
    if ((st = client.close_sequence(engine->sequence())) != KVTIER_OK) return fail(client, "close", st);
  }
  const std::size_t row_bytes = 2ull * config.num_kv_heads * config.head_dim * sizeof(float) * config.num_layers;
  kvtier_client_counters counters{};
  counters.struct_size = sizeof counters;
  client.counters(counters);
  static const char* const kReasons[] = {"none", "pool_full", "node_budget"};
  const char* reason = counters.backpressure_reason < 3 ? kReasons[counters.backpressure_reason] : "unknown";
  std::printf("summary name=%s sequences=%u steps=%u plans=%llu plans_failed=%llu plans_rejected=%u rows_offloaded=%llu "
              "rows_restored=%llu bytes_moved=%llu score_records=%llu dropped=%llu steps_compared=%llu "
              "steps_identical=%llu max_abs_diff=%.3g peak_t0_tokens=%u full_tokens=%u rows_to_t2=%llu "
              "rows_restored_t2=%llu rows_t2_evicted=%llu t3_tokens=%llu audit_steps=%llu audit_rows=%llu audit_exact_mismatch=%llu "
              "audit_t2_rows=%llu audit_t2_max_abs_err=%.3g audit_t2_bound_violations=%llu audit_tier_mismatch=%llu "
              "lost_tokens=%llu backpressure_tokens=%llu backpressure_reason=%s daemon_losses=%llu reattachments=%llu "
              "detached=%u reattach_refused=%u max_in_flight=%zu\n",
              o.name.c_str(), o.sequences, o.steps, static_cast<unsigned long long>(total.plans),
              static_cast<unsigned long long>(total.plans_failed), plans_rejected,
              static_cast<unsigned long long>(total.rows_offloaded), static_cast<unsigned long long>(total.rows_restored),
              static_cast<unsigned long long>((total.rows_offloaded + total.rows_restored) * row_bytes),
              static_cast<unsigned long long>(counters.score_records_pushed),
              static_cast<unsigned long long>(counters.score_records_dropped),
              static_cast<unsigned long long>(total.steps_compared),
              static_cast<unsigned long long>(total.steps_identical), total.max_abs_diff, total.peak_t0,
              o.prompt + o.steps, static_cast<unsigned long long>(total.rows_to_t2),
              static_cast<unsigned long long>(total.rows_restored_t2),
              static_cast<unsigned long long>(total.rows_t2_evicted), static_cast<unsigned long long>(total.t3_tokens),
              static_cast<unsigned long long>(audit.steps), static_cast<unsigned long long>(audit.rows),
              static_cast<unsigned long long>(audit.exact_mismatch), static_cast<unsigned long long>(audit.t2_rows),
              audit.t2_max_abs_err, static_cast<unsigned long long>(audit.t2_bound_violations),
              static_cast<unsigned long long>(audit.tier_mismatch), static_cast<unsigned long long>(lost_tokens),
              static_cast<unsigned long long>(counters.backpressure_tokens), reason,
              static_cast<unsigned long long>(counters.daemon_losses),
              static_cast<unsigned long long>(counters.reattachments), counters.detached, counters.reattach_refused,
              max_in_flight);
  if (audit.exact_mismatch + audit.t2_bound_violations + audit.tier_mismatch + lost_tokens != 0) return 6;
  if (o.expect_exact && total.steps_identical != total.steps_compared) return 5;
  return 0;
}
