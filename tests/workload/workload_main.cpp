// kvtier-workload: a synthetic inference engine. Connects to kvtierd as an engine client,
// registers a KV geometry, opens a few sequences and runs a decode loop that streams per-token
// attention scores every step and executes (acknowledges) every plan it receives.
//
// Used by scripts/demo and by the integration tests (--hold keeps it connected until SIGTERM).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/kvtier.hpp"

namespace {

volatile std::sig_atomic_t g_stop = 0;

struct Options {
  std::string socket;
  std::string name = "workload";
  unsigned sequences = 3;
  unsigned prompt = 64;
  unsigned steps = 256;
  unsigned step_us = 0;  // sleep per step, to make a run observable
  bool hold = false;     // stay connected after the loop until SIGTERM/SIGINT
};

int fail(const kvtier::Client& client, const char* what, kvtier_status status) {
  std::fprintf(stderr, "kvtier-workload: %s: %s: %s\n", what, kvtier_status_string(status),
               client ? client.last_error().c_str() : kvtier_client_last_error(nullptr));
  return status == KVTIER_E_UNAVAILABLE ? 3 : 1;
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (arg == "--hold") {
      o.hold = true;
      continue;
    }
    if ((v = next()) == nullptr) return false;
    if (arg == "--socket") o.socket = v;
    else if (arg == "--name") o.name = v;
    else if (arg == "--sequences") o.sequences = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
    else if (arg == "--prompt") o.prompt = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
    else if (arg == "--steps") o.steps = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
    else if (arg == "--step-us") o.step_us = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
    else return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fputs("usage: kvtier-workload [--socket PATH] [--name N] [--sequences K] [--prompt P] [--steps S] "
               "[--step-us U] [--hold]\n",
               stderr);
    return 2;
  }
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  std::signal(SIGINT, [](int) { g_stop = 1; });

  kvtier::Client client;
  kvtier_status st = client.connect(o.socket, o.name);
  if (st != KVTIER_OK) return fail(client, "connect", st);
  const unsigned pool_tokens = o.sequences * (o.prompt + o.steps);
  st = client.register_model(4, 2, 64, KVTIER_DTYPE_BF16, pool_tokens, "synthetic-4L");
  if (st != KVTIER_OK) return fail(client, "register", st);

  std::vector<std::uint32_t> ids(o.sequences);
  for (auto& id : ids) {
    if ((st = client.open_sequence(o.prompt, id)) != KVTIER_OK) return fail(client, "open", st);
  }
  std::mt19937 rng(42);
  std::lognormal_distribution<float> heavy(0.0f, 1.5f);
  std::vector<float> scores;
  unsigned plans = 0;
  for (unsigned step = 0; step < o.steps && g_stop == 0; ++step) {
    for (const auto id : ids) {
      // Attention of the new query (position prompt + step) over every position so far.
      const unsigned length = o.prompt + step + 1;
      scores.resize(length);
      float sum = 0;
      for (auto& s : scores) sum += (s = heavy(rng));
      for (auto& s : scores) s /= sum;
      if ((st = client.push_scores(id, step, 0, scores)) != KVTIER_OK) return fail(client, "push", st);
    }
    kvtier_plan plan{};
    while ((st = client.poll_plan(std::chrono::milliseconds(0), plan)) == KVTIER_OK) {
      if ((st = client.ack_plan(plan.epoch, true)) != KVTIER_OK) return fail(client, "ack", st);
      ++plans;
    }
    if (st != KVTIER_E_TIMEOUT) return fail(client, "poll", st);
    if (o.step_us != 0) std::this_thread::sleep_for(std::chrono::microseconds(o.step_us));
  }
  while (o.hold && g_stop == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (const auto id : ids) {
    if ((st = client.close_sequence(id)) != KVTIER_OK) return fail(client, "close", st);
  }
  kvtier_client_counters counters{};
  client.counters(counters);
  std::printf("kvtier-workload %s: %u sequences, %u steps, %llu score records (%llu dropped), %u plans applied\n",
              o.name.c_str(), o.sequences, o.steps, static_cast<unsigned long long>(counters.score_records_pushed),
              static_cast<unsigned long long>(counters.score_records_dropped), plans);
  return 0;
}
