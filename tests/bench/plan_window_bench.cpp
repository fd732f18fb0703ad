// plan_window: plans per second for one client with S sequences that all become due at once, with
// kvtierd's plan window (limits.plans_in_flight) at 16 against 1 (one plan of the client in
// flight at a time, how kvtierd worked before the window). Two real kvtierds (BenchDaemon), one
// real libkvtier client each; blocks of rounds alternate between them and each side reports the
// median block, so a change in the machine's load hits both alike.
//
// Each round every sequence pushes scores for its T tokens and ends a step (Δ = 1, decay 0.01,
// β 0.5; the scores favour the other half of the tokens each step, so every decision swaps T0 and
// T1 and is a plan of T moves). The client then polls plans until it has one per sequence and
// "executes" each (copies one row per move between two buffers, as the CPU backend copies pool
// rows) before acknowledging it as applied. With a window of 1 kvtierd decides the next sequence
// only after the previous plan's acknowledgement: deciding and executing take turns. With the
// window the sequences' plans go out together, and kvtierd decides while the client executes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_daemon.hpp"
#include "harness.hpp"
#include "kvtier/kvtier.h"

namespace kvtier::bench {
namespace {

constexpr std::uint32_t kSequences = 16;
constexpr std::uint32_t kTokens = 1024;
constexpr std::uint32_t kWindow = 16;
constexpr std::size_t kRowBytes = 512;  // what one move copies

// One kvtierd with limits.plans_in_flight = window, its client and the client's sequences.
class Side {
 public:
  static Result<std::unique_ptr<Side>> start(std::uint32_t window) {
    // Appended, not "w" + std::to_string(): GCC 12 at -O3 reports a false -Wrestrict for that.
    std::string tag = "w";
    tag += std::to_string(window);
    auto daemon = BenchDaemon::start(tag, {"limits.plans_in_flight=" + std::to_string(window),
                                           "limits.plan_ring_records=4096"});
    if (!daemon) return tl::unexpected(daemon.error());
    auto side = std::unique_ptr<Side>(new Side(std::move(*daemon)));
    if (auto ok = side->connect(); !ok) return tl::unexpected(ok.error());
    return side;
  }
  ~Side() { kvtier_client_free(client_); }

  // Plans per second over `rounds` rounds.
  Result<double> block(std::uint32_t rounds) {
    const auto start = Clock::now();
    for (std::uint32_t r = 0; r < rounds; ++r, ++step_) {
      for (std::uint32_t p = 0; p < kTokens; ++p) scores_[p] = (p < kTokens / 2) == (step_ % 2 == 0) ? 1.0f : 0.0f;
      for (const std::uint32_t id : ids_) {
        if (auto ok = check(kvtier_scores_push(client_, id, step_, 0, scores_.data(), kTokens), client_, "scores"); !ok) {
          return tl::unexpected(ok.error());
        }
        if (auto ok = check(kvtier_sequence_step_end(client_, id, step_), client_, "step end"); !ok) {
          return tl::unexpected(ok.error());
        }
      }
      for (std::uint32_t received = 0; received < kSequences; ++received) {
        kvtier_plan plan;
        if (auto ok = check(kvtier_plan_poll(client_, 10000, &plan), client_, "poll"); !ok) return tl::unexpected(ok.error());
        for (std::size_t i = 0; i < plan.move_count; ++i) {
          const std::size_t row = plan.moves[i].position % kTokens;
          std::memcpy(&to_[row * kRowBytes], &from_[row * kRowBytes], kRowBytes);
        }
        do_not_optimize(to_[0]);
        if (auto ok = check(kvtier_plan_ack(client_, plan.epoch, 1), client_, "ack"); !ok) return tl::unexpected(ok.error());
      }
    }
    const double seconds = seconds_between(start, Clock::now());
    return seconds > 0 ? static_cast<double>(rounds) * kSequences / seconds : 0.0;
  }

 private:
  explicit Side(BenchDaemon daemon)
      : daemon_(std::move(daemon)), scores_(kTokens), from_(kTokens * kRowBytes, std::byte{1}), to_(kTokens * kRowBytes) {}

  Status connect() {
    // A plan in flight holds old and new rows.
    if (auto ok = daemon_.connect_engine(kSequences * kTokens, &client_); !ok) return ok;
    ids_.resize(kSequences);
    for (std::uint32_t& id : ids_) {
      kvtier_sequence_options o;
      kvtier_sequence_options_init(&o);
      o.use_defaults = 0;
      o.prompt_length = 0;
      o.sink_tokens = 0;
      o.window_tokens = 0;
      o.interval = 1;
      o.hbm_ratio = 0.5;
      o.decay = 0.01;
      if (auto ok = check(kvtier_sequence_open_with(client_, &o, &id), client_, "open"); !ok) return ok;
    }
    return {};
  }

  BenchDaemon daemon_;
  kvtier_client* client_ = nullptr;
  std::vector<std::uint32_t> ids_;
  std::vector<float> scores_;
  std::vector<std::byte> from_, to_;
  std::uint32_t step_ = 0;
};

Status run(const RunConfig& config, Reporter& reporter) {
  const std::uint32_t blocks = config.quick ? 3 : 9, rounds = config.quick ? 5 : 40;
  auto serial = Side::start(1);
  if (!serial) return tl::unexpected(serial.error());
  auto windowed = Side::start(kWindow);
  if (!windowed) return tl::unexpected(windowed.error());
  for (Side* side : {serial->get(), windowed->get()}) {  // warm-up
    if (auto ok = side->block(3); !ok) return tl::unexpected(ok.error());
  }
  std::vector<double> one, many;
  for (std::uint32_t b = 0; b < blocks; ++b) {
    auto a = (*serial)->block(rounds);
    if (!a) return tl::unexpected(a.error());
    auto w = (*windowed)->block(rounds);
    if (!w) return tl::unexpected(w.error());
    one.push_back(*a);
    many.push_back(*w);
  }
  const double serial_rate = median(one), windowed_rate = median(many);
  char note[192];
  std::snprintf(note, sizeof(note),
                "%u sequences of %u tokens, %u blocks of %u rounds: window %u %.0f plans/s, window 1 %.0f plans/s "
                "(medians)",
                kSequences, kTokens, blocks, rounds, kWindow, windowed_rate, serial_rate);
  reporter.progress("plan_window", note);
  reporter.report(Measure{"plan_window", serial_rate > 0 ? windowed_rate / serial_rate : 0.0,
                          Figure{"plans_per_s_window16", windowed_rate, "/s"},
                          Figure{"plans_per_s_window1", serial_rate, "/s"}, ">1"});
  return {};
}

}  // namespace

void register_plan_window(Registry& registry) {
  registry.add("plan_window",
               "real kvtierd + 1 client x 16 sequences due together, plans executed as row copies: plans/s with "
               "16 plans in flight vs 1",
               run);
}

}  // namespace kvtier::bench
