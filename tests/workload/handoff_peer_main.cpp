// kvtier-handoff-peer: one side of a sequence hand-off between two engine processes, over a
// synthetic KV cache (handoff_peer_cache.hpp: 4 layers, 2 KV heads, head_dim 16, f32, every
// element a hash of its coordinates in [-1, 1]), for the integration tests and the demo.
//
//   --role export --prompt P --steps N: registers, opens a sequence (slot = position, P + N slots in
//     ONE allocation: a memfd on cpu, one cudaMalloc on cuda or with --buffer vmm one cuMem VMM
//     allocation exported as a POSIX fd), writes the prompt, runs N decode
//     steps (rows, scores that keep sinks and recent tokens high, step_end, plans executed and
//     acknowledged; lockstep: kvtier_client_sync after each step end and ack, so plans arrive at
//     the same steps on every run), applies the plans still waiting, exports with its T0 list (retrying
//     after applying pending plans on bad_state), writes the token to --token-file atomically,
//     waits for --done-file (60 s), closes the sequence.
//   --role adopt --steps M: waits for --token-file, adopts, attaches its own cache (positions + M
//     slots), executes and acknowledges the hand-off plan, checks every row (TPEER -> T0 rows and
//     staged T1 rows bit-identical, T2 rows within the int8 bound, no position named twice or out
//     of range), writes --done-file, then runs M more decode steps re-checking each one. A token
//     that was ever in T2 holds dequantized values from then on (in T0 and T1 too): it is checked
//     against the bound times its stays in T2, which the exporter writes to <token-file>.quantized.
//     --fail-first acknowledges the first hand-off plan as failed, closes that copy and adopts
//     again with the same token (the sequence went back to the exporter meanwhile);
//     --exit-after-adopt exits right after adopting, abandoning the hand-off.
//   --policy r_kv --digest-dim D (both roles): the sequence ranks by R-KV and every row comes with
//     a key digest of D floats; the adopter checks that kvtier_sequence_adopt reports the policy
//     and the exporter's width, and pushes digests of that width.
//   --role adopt --expect-error CODE: the adopt must fail with that status name (e.g.
//     not_found); exit 0 when it does.
//
// The engine (plans, scores, row checks) is handoff_peer_engine.hpp.
//
// Prints `summary role=export t0= t1= t2= t3= plans=` or `summary role=adopt peer_rows= t1_rows=
// t2_rows= t3= mismatches= lost= steps= plans=`. Exit: 0 ok, 1 failure (the call and
// kvtier_client_last_error on stderr), 2 usage, 3 daemon unreachable, 4 --backend cuda without a
// usable device (--probe checks only that), 6 a row mismatch or a lost / duplicate position.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backend_probe.hpp"
#include "handoff_peer_cache.hpp"
#include "handoff_peer_engine.hpp"
#include "kvtier/kvtier.hpp"

namespace {

using kvtier::workload::Engine;
using kvtier::workload::Failed;
using kvtier::workload::PeerCache;
using kvtier::workload::check;
using kvtier::workload::kUnseen;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string role, socket, token_file, done_file, expect_error;
  std::optional<std::uint64_t> token;
  unsigned prompt = 64, steps = 64, pool_tokens = 0, int8_pool_tokens = 0;
  bool probe = false;
  bool fail_first = false;  // adopt: acknowledge the first hand-off plan as failed, then adopt again
  bool exit_after_adopt = false;  // adopt: exit right after adopting (the hand-off is abandoned)
  bool vmm = false;               // export on cuda: a cuMem VMM buffer (CUDA_VMM_FD), not cudaMalloc
  kvtier_backend backend = KVTIER_BACKEND_CPU;
  kvtier_sequence_options tiering{};
};

bool parse(int argc, char** argv, Options& o) {
  kvtier_sequence_options_init(&o.tiering);
  o.tiering.use_defaults = 0;  // small windows so a short run tiers at all
  o.tiering.window_tokens = 16;
  o.tiering.interval = 8;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--probe") { o.probe = true; continue; }
    if (arg == "--fail-first") { o.fail_first = true; continue; }
    if (arg == "--exit-after-adopt") { o.exit_after_adopt = true; continue; }
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    const auto u = [v] { return static_cast<unsigned>(std::strtoul(v, nullptr, 10)); };
    if (arg == "--role") o.role = v;
    else if (arg == "--socket") o.socket = v;
    else if (arg == "--token-file") o.token_file = v;
    else if (arg == "--done-file") o.done_file = v;
    else if (arg == "--token") o.token = std::strtoull(v, nullptr, 10);
    else if (arg == "--expect-error") o.expect_error = v;
    else if (arg == "--prompt") o.prompt = u();
    else if (arg == "--steps") o.steps = u();
    else if (arg == "--pool-tokens") o.pool_tokens = u();
    else if (arg == "--int8-pool-tokens") o.int8_pool_tokens = u();
    else if (arg == "--beta") o.tiering.hbm_ratio = std::strtod(v, nullptr);
    else if (arg == "--evict") o.tiering.evict_ratio = std::strtod(v, nullptr);
    else if (arg == "--interval") o.tiering.interval = u();
    else if (arg == "--window") o.tiering.window_tokens = u();
    else if (arg == "--sinks") o.tiering.sink_tokens = u();
    else if (arg == "--int8-ratio") o.tiering.int8_ratio = std::strtod(v, nullptr);
    else if (arg == "--digest-dim") o.tiering.key_digest_dim = u();
    else if (arg == "--policy") {
      if (std::strcmp(v, "paper") != 0 && std::strcmp(v, "r_kv") != 0) return false;
      o.tiering.policy = std::strcmp(v, "r_kv") == 0 ? KVTIER_POLICY_R_KV : KVTIER_POLICY_PAPER;
    }
    else if (arg == "--buffer") {
      if (std::strcmp(v, "ipc") != 0 && std::strcmp(v, "vmm") != 0) return false;
      o.vmm = std::strcmp(v, "vmm") == 0;
    }
    else if (arg == "--backend") {
      if (std::strcmp(v, "cpu") != 0 && std::strcmp(v, "cuda") != 0) return false;
      o.backend = std::strcmp(v, "cuda") == 0 ? KVTIER_BACKEND_CUDA : KVTIER_BACKEND_CPU;
    } else return false;
  }
  if (o.probe) return true;
  if (o.role == "export") return !o.token_file.empty() && !o.done_file.empty() && o.prompt > 0;
  if (o.role == "adopt") return !o.expect_error.empty() ? (o.token || !o.token_file.empty()) : !o.token_file.empty();
  return false;
}

bool wait_for_file(const std::string& path, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  while (::access(path.c_str(), F_OK) != 0) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text << '\n';
    if (!out.flush()) {
      std::fprintf(stderr, "kvtier-handoff-peer: cannot write %s\n", tmp.c_str());
      throw Failed{1};
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::fprintf(stderr, "kvtier-handoff-peer: cannot rename %s to %s\n", tmp.c_str(), path.c_str());
    throw Failed{1};
  }
}

// One sequence of this process: its cache, each position's tier as the plans said, counters.
kvtier_model_geometry geometry(const Options& o, unsigned pool_tokens) {
  kvtier_model_geometry g;
  kvtier_model_geometry_init(&g);
  g.num_layers = kvtier::workload::kPeerLayers;
  g.num_kv_heads = kvtier::workload::kPeerHeads;
  g.head_dim = kvtier::workload::kPeerDim;
  g.dtype = KVTIER_DTYPE_F32;
  g.model_name = "handoff-peer-4L";
  g.pool_tokens = o.pool_tokens != 0 ? o.pool_tokens : pool_tokens;
  g.int8_pool_tokens = o.int8_pool_tokens;
  return g;
}

PeerCache make_cache(std::uint32_t slots, PeerCache::Memory memory) {
  auto cache = PeerCache::create(slots, memory);
  check(cache ? kvtier::Status{} : kvtier::Status(tl::unexpected(cache.error())), "cache");
  return std::move(*cache);
}

int run_export(const Options& o, kvtier::Client& client) {
  check(client, "register", client.register_model(geometry(o, o.prompt + o.steps)));
  kvtier_sequence_options options = o.tiering;
  options.prompt_length = o.prompt;
  std::uint32_t sequence = 0;
  check(client, "open", client.open_sequence(options, sequence));
  const PeerCache::Memory memory = o.backend != KVTIER_BACKEND_CUDA ? PeerCache::Memory::kHostFd
                                    : o.vmm                          ? PeerCache::Memory::kDeviceVmm
                                                                     : PeerCache::Memory::kDevice;
  PeerCache cache = make_cache(o.prompt + o.steps, memory);
  check(client, "attach", client.attach_cache(sequence, cache.layout()));
  Engine engine{client, sequence, cache, std::vector<std::uint8_t>(o.prompt, KVTIER_T0), {}};
  std::vector<float> prefill(o.prompt, 1.0f / static_cast<float>(o.prompt));
  for (std::uint32_t p = 0; p < o.prompt; ++p) check(cache.write(p, p), "write prompt");
  if (o.tiering.policy == KVTIER_POLICY_R_KV) {
    engine.digest_dim = o.tiering.key_digest_dim != 0 ? o.tiering.key_digest_dim : 16;
    engine.push_digests(0, o.prompt);
  }
  check(client, "push prompt scores", client.push_scores(sequence, 0, 0, prefill));
  for (std::uint32_t step = 0; step < o.steps; ++step) {
    engine.drain(std::chrono::milliseconds(0));
    engine.decode(o.prompt + step, step);
  }
  while (engine.drain(std::chrono::milliseconds(0))) {  // lockstep: every owed plan is already out
  }
  std::uint64_t token = 0;
  for (int attempt = 0;; ++attempt) {
    std::vector<std::uint32_t> t0;
    for (std::uint32_t p = 0; p < engine.tiers.size(); ++p) {
      if (engine.tiers[p] == KVTIER_T0) t0.push_back(p);
    }
    const kvtier_export_buffer buffer = cache.export_buffer();
    const kvtier_status st =
        kvtier_sequence_export(client.get(), sequence, &buffer, t0.data(), t0.data(), t0.size(), &token);
    if (st != KVTIER_E_BAD_STATE || attempt >= 20) {
      check(client, "export", st);
      break;
    }
    engine.drain(std::chrono::milliseconds(50));  // a plan in flight: apply it, then export again
  }
  // The adopter checks rows against the generated values: tell it which ones were quantized.
  std::string quantized;
  for (std::uint32_t p = 0; p < engine.quantized.size(); ++p) {
    if (engine.quantized[p] != 0) quantized += std::to_string(p) + " " + std::to_string(engine.quantized[p]) + "\n";
  }
  write_file_atomically(o.token_file + ".quantized", quantized);
  write_file_atomically(o.token_file, std::to_string(token));
  if (!wait_for_file(o.done_file, std::chrono::seconds(60))) {
    std::fprintf(stderr, "kvtier-handoff-peer: no %s within 60 s\n", o.done_file.c_str());
    return 1;
  }
  check(client, "close", client.close_sequence(sequence));
  std::printf("summary role=export t0=%u t1=%u t2=%u t3=%u plans=%u\n", engine.count(KVTIER_T0),
              engine.count(KVTIER_T1), engine.count(KVTIER_T2), engine.count(KVTIER_T3), engine.plans);
  return 0;
}

std::uint64_t read_token(const Options& o) {
  if (o.token) return *o.token;
  if (!wait_for_file(o.token_file, std::chrono::seconds(60))) {
    std::fprintf(stderr, "kvtier-handoff-peer: no %s within 60 s\n", o.token_file.c_str());
    throw Failed{1};
  }
  std::ifstream in(o.token_file);
  std::uint64_t token = 0;
  if (!(in >> token)) {
    std::fprintf(stderr, "kvtier-handoff-peer: %s holds no token\n", o.token_file.c_str());
    throw Failed{1};
  }
  return token;
}

int run_adopt(const Options& o, kvtier::Client& client) {
  check(client, "register", client.register_model(geometry(o, 4096)));
  const std::uint64_t token = read_token(o);
  kvtier_adopted adopted{};
  adopted.struct_size = sizeof(adopted);
  const kvtier_status st = kvtier_sequence_adopt(client.get(), token, &adopted);
  if (!o.expect_error.empty()) {
    std::printf("adopt: %s: %s\n", kvtier_status_string(st), client.last_error().c_str());
    return st != KVTIER_OK && o.expect_error == kvtier_status_string(st) ? 0 : 1;
  }
  check(client, "adopt", st);
  if (o.exit_after_adopt) {
    std::printf("summary role=adopt abandoned=1 sequence=%u\n", adopted.sequence);
    std::fflush(stdout);
    std::_Exit(0);  // gone without executing or acknowledging the hand-off plan
  }
  unsigned failed_handoffs = 0;
  if (o.fail_first) {
    // Refuse the hand-off: kvtierd gives the sequence back to the exporter, still exported, and
    // the same token adopts it again.
    kvtier_plan refused{};
    check(client, "poll the first hand-off plan", client.poll_plan(std::chrono::milliseconds(10000), refused));
    check(client, "ack as failed", client.ack_plan(refused.epoch, false));
    check(client, "close the refused copy", client.close_sequence(adopted.sequence));
    ++failed_handoffs;
    kvtier_status again = KVTIER_E_NOT_FOUND;
    for (int attempt = 0; attempt < 100 && again == KVTIER_E_NOT_FOUND; ++attempt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the return is asynchronous
      again = kvtier_sequence_adopt(client.get(), token, &adopted);
    }
    check(client, "adopt again", again);
  }
  // The sequence keeps the exporter's policy and key digest width (SequenceAdopted, protocol 1.3).
  const std::uint32_t digest_dim = o.tiering.key_digest_dim != 0 ? o.tiering.key_digest_dim : 16;
  if (adopted.policy != o.tiering.policy || (adopted.policy == KVTIER_POLICY_R_KV && adopted.key_digest_dim != digest_dim)) {
    std::fprintf(stderr, "kvtier-handoff-peer: adopted policy %d with key_digest_dim %u, expected policy %d dim %u\n",
                 static_cast<int>(adopted.policy), adopted.key_digest_dim, static_cast<int>(o.tiering.policy), digest_dim);
    return 1;
  }
  PeerCache cache = make_cache(adopted.positions + o.steps, o.backend == KVTIER_BACKEND_CUDA
                                                                ? PeerCache::Memory::kDevice
                                                                : PeerCache::Memory::kHost);
  check(client, "attach", client.attach_cache(adopted.sequence, cache.layout()));
  Engine engine{client, adopted.sequence, cache, std::vector<std::uint8_t>(adopted.positions, kUnseen), {}};
  if (adopted.policy == KVTIER_POLICY_R_KV) engine.digest_dim = adopted.key_digest_dim;  // the library's width too
  engine.quantized.resize(adopted.positions, 0);
  std::ifstream quantized(o.token_file + ".quantized");
  for (unsigned p = 0, times = 0; quantized >> p >> times;) {
    if (p < adopted.positions) engine.quantized[p] = static_cast<std::uint8_t>(times);
  }
  kvtier_plan plan{};
  check(client, "poll the hand-off plan", client.poll_plan(std::chrono::milliseconds(10000), plan));
  engine.apply(plan);
  // Positions named T0/T1/T2 plus those never named (evicted) make up `positions`: apply() counted
  // any position named twice or beyond `positions` as lost.
  const unsigned t1 = engine.count(KVTIER_T1), t2 = engine.count(KVTIER_T2), t3 = engine.count(kUnseen);
  for (std::uint8_t& tier : engine.tiers) {
    if (tier == kUnseen) tier = KVTIER_T3;
  }
  engine.verify(o.backend);
  write_file_atomically(o.done_file, "done");
  for (std::uint32_t j = 0; j < o.steps; ++j) {
    engine.drain(std::chrono::milliseconds(0));
    engine.decode(adopted.positions + j, adopted.positions + j);
    engine.drain(std::chrono::milliseconds(0));
    engine.verify(o.backend);
  }
  check(client, "close", client.close_sequence(adopted.sequence));
  std::printf("summary role=adopt peer_rows=%u t1_rows=%u t2_rows=%u t3=%u mismatches=%u lost=%u steps=%u plans=%u "
              "failed_handoffs=%u digest_dim=%u\n",
              engine.peer_rows, t1, t2, t3, engine.mismatches, engine.lost, o.steps, engine.plans, failed_handoffs,
              engine.digest_dim);
  return engine.mismatches + engine.lost != 0 ? 6 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fputs("usage: kvtier-handoff-peer [--probe] [--backend cpu|cuda] --socket S --token-file F --done-file D\n"
               "  --role export --prompt P --steps N [--beta B] [--evict R] [--interval K] [--window W] [--sinks S]\n"
               "                [--buffer ipc|vmm (cuda: cudaMalloc + CUDA IPC, or cuMem VMM + POSIX fd)]\n"
               "                [--pool-tokens N] [--int8-pool-tokens N --int8-ratio R] [--policy paper|r_kv --digest-dim D]\n"
               "  --role adopt --steps M [--pool-tokens N] [--int8-pool-tokens N] [--fail-first | --exit-after-adopt]\n"
               "               [--policy paper|r_kv --digest-dim D]\n"
               "  --role adopt --expect-error CODE [--token T | --token-file F]\n",
               stderr);
    return 2;
  }
  if (const auto stop = kvtier::workload::check_backend("kvtier-handoff-peer", o.backend, o.probe)) return *stop;
  try {
    kvtier::Client client;
    check(client, "connect", client.connect(o.socket, "handoff-" + o.role));
    return o.role == "export" ? run_export(o, client) : run_adopt(o, client);
  } catch (const Failed& failed) {
    return failed.code;
  }
}
