// Fuzz target: the daemon's data-plane reader of one client (daemon/src/client_channel.hpp)
// against a client that writes whatever it likes into its segments.
//
// A real ClientChannel over real (small) control, pool and int8 pool segments, as the Server
// creates them (POSIX shm named /kvtier.fuzz<pid>-<n>...., unlinked when the channel goes), with
// the daemon's own preconditions kept by the harness: sequences are opened with parameters
// tier::validate accepts (Session checks them first) and ids the session would give. The client
// side is the input: score records of every kind (valid or not), plan acks and failures, raw
// writes into the control segment and into pool rows (the daemon quantizes those into the int8
// pool), exports (ClientChannel::freeze) with T0 lists, closes and doorbells (service()).
//
// Input (fuzz_input.hpp): u8 ring capacities (score 2^(b & 3), plan 2^((b >> 2) & 3)), u8 layers-1
// (% 2), u8 heads-1 (% 2), u8 head_dim/8-1 (% 4), u8 dtype (% 3), u8 pool slots-1 (% 64), u8 int8
// blocks (% 5; 0: no int8 pool), u8 pressure rule (% 4), node budget (bit 2: none, 8 rows) and
// plans in flight (bit 3: 4, 1), then
// operations, each a u8 opcode and its operands (see the switch below).
//
// Beyond "no crash, no sanitizer report, no assertion": the channel's snapshot stays consistent
// (per sequence T0 + T1 + T2 + T3 = length, pool slots used <= slots), and a channel that reports
// the client broken stays quiet afterwards.
#include <sys/eventfd.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <spdlog/logger.h>

#include "client_channel.hpp"
#include "fuzz_input.hpp"
#include "kvtier/shm/control_segment.hpp"
#include "kvtier/shm/int8_pool_segment.hpp"
#include "kvtier/shm/pool_segment.hpp"
#include "kvtier/shm/segment.hpp"

namespace {

using kvtier::fuzz::FuzzInput;
namespace daemon = kvtier::daemon;
namespace shm = kvtier::shm;
namespace tier = kvtier::tier;

constexpr std::uint64_t kEpoch = 0xf0221;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "client_channel_fuzz: property violated: %s\n", what);
  std::abort();
}

[[noreturn]] void setup_failed(const char* what, const kvtier::Error& error) {
  std::fprintf(stderr, "client_channel_fuzz: cannot set up (%s): %s\n", what, error.message.c_str());
  std::abort();
}

std::string segment_name(std::uint32_t id, shm::SegmentKind kind) {
  auto name = shm::segment_name("fuzz" + std::to_string(::getpid()), id, kind);
  if (!name) setup_failed("segment name", name.error());
  return *name;
}

// A score value: mostly small non-negative numbers, sometimes what a broken client sends.
float score_value(std::uint8_t b) {
  switch (b) {
    case 255: return std::numeric_limits<float>::quiet_NaN();
    case 254: return std::numeric_limits<float>::infinity();
    case 253: return -1.0f;
    case 252: return std::numeric_limits<float>::max();
    case 251: return std::numeric_limits<float>::denorm_min();
    default: return static_cast<float>(b) / 32.0f;
  }
}

std::optional<tier::TierParams> tier_params(FuzzInput& in, bool int8_pool) {
  tier::TierParams p;
  p.policy = tier::kAllPolicies[in.below<std::uint8_t>(static_cast<std::uint8_t>(tier::kAllPolicies.size()))];
  p.mode = static_cast<tier::EvictionMode>(in.below<std::uint8_t>(3));
  p.interval = 1 + in.below<std::uint8_t>(4);
  p.sink_tokens = in.below<std::uint8_t>(8);
  p.window_tokens = in.below<std::uint8_t>(16);
  p.hbm_ratio = in.take<std::uint8_t>() / 255.0;
  p.evict_ratio = in.take<std::uint8_t>() / 255.0;
  p.hbm_tokens = in.below<std::uint8_t>(4) == 0 ? in.below<std::uint8_t>(32) : 0;
  p.evict_tokens = in.below<std::uint8_t>(4) == 0 ? in.below<std::uint8_t>(32) : 0;
  const auto extras = in.take<std::uint8_t>();
  if (int8_pool && (extras & 1) != 0) p.int8_ratio = in.take<std::uint8_t>() / 255.0;
  if ((extras & 2) != 0) p.hysteresis = in.below<std::uint8_t>(100) / 100.0;
  if ((extras & 4) != 0) p.decay = (1 + in.below<std::uint8_t>(100)) / 100.0;
  if ((extras & 8) != 0) p.protect_prompt = (extras & 16) != 0;
  p.seed = extras;
  if (!tier::validate(p)) return std::nullopt;  // Session refuses these
  return p;
}

struct Harness {
  asio::io_context io;
  spdlog::logger log{"client_channel_fuzz"};
  kvtier::config::DaemonConfig config;
  std::unique_ptr<daemon::NodeBudget> budget;
  std::unique_ptr<daemon::ClientChannel> channel;
  std::span<std::byte> control;  // the channel owns the segments; these stay valid while it lives
  std::span<std::byte> pool;
  std::optional<shm::ControlLayout> layout;
  std::optional<shm::ScoreProducer> scores;
  std::optional<shm::PlanConsumer> plans;
  bool failed = false;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static std::uint32_t next_client = 1;
  FuzzInput in(data, size);
  Harness h;
  h.log.set_level(spdlog::level::off);
  const auto caps = in.take<std::uint8_t>();
  const std::uint32_t layers = 1u + in.below<std::uint8_t>(2), heads = 1u + in.below<std::uint8_t>(2);
  const std::uint32_t head_dim = 8u * (1u + in.below<std::uint8_t>(4));
  const auto dtype = static_cast<kvtier::kernels::KvDtype>(in.below<std::uint8_t>(3));
  const std::uint32_t slots = 1u + in.below<std::uint8_t>(64);
  const std::uint32_t int8_blocks = in.below<std::uint8_t>(5);
  const auto rule = in.take<std::uint8_t>();
  static constexpr const char* kPressure[] = {"demote-evict", "demote", "evict", "backpressure"};
  h.config.pools.pressure = kPressure[rule % 4];
  h.config.pools.int8_group_tokens = 4;
  h.config.limits.max_tokens_per_sequence = 1024;
  h.config.limits.plans_in_flight = (rule & 8) != 0 ? 1 : 4;  // one plan at a time, or several
  auto geometry = shm::make_pool_geometry(layers, heads, head_dim,
                                          static_cast<std::uint32_t>(kvtier::kernels::dtype_bytes(dtype)), slots);
  if (!geometry) setup_failed("pool geometry", geometry.error());
  if ((rule & 4) != 0) h.config.pools.ddr_bytes_total = 8 * geometry->row_bytes() * layers;
  h.budget = std::make_unique<daemon::NodeBudget>(h.config.pools, [](std::uint32_t) {});

  const std::uint32_t id = next_client++;
  auto layout = shm::ControlLayout::make(1u << (caps & 3), 1u << ((caps >> 2) & 3));
  if (!layout) setup_failed("control layout", layout.error());
  h.layout = *layout;
  auto control = shm::create_control_segment(segment_name(id, shm::SegmentKind::kControl), *layout, kEpoch, id);
  if (!control) setup_failed("control segment", control.error());
  h.control = control->bytes();
  const shm::ControlBlock& block = layout->block();
  h.scores.emplace(h.control.subspan(block.score_ring_offset, block.score_ring_bytes), block.score_capacity);
  h.plans.emplace(h.control.subspan(block.plan_ring_offset, block.plan_ring_bytes), block.plan_capacity);
  const int doorbell = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (doorbell < 0) std::abort();
  h.channel = std::make_unique<daemon::ClientChannel>(
      h.io, id, std::move(*control), *layout, kvtier::UniqueFd(doorbell), h.config, *h.budget, h.log,
      [&h](const kvtier::Error&) {
        if (h.failed) fail("the channel reported the client broken twice");
        h.failed = true;
      },
      [](const daemon::HandoffOrigin&, std::optional<tier::SequenceTiers>) {});

  auto pool_segment = shm::create_pool_segment(segment_name(id, shm::SegmentKind::kPool), *geometry, kEpoch, id);
  if (!pool_segment) setup_failed("pool segment", pool_segment.error());
  h.pool = pool_segment->bytes();
  daemon::PoolSetup setup{std::move(*pool_segment), *geometry, std::nullopt, dtype, 1};
  if (int8_blocks != 0) {
    auto g = shm::make_int8_pool_geometry(layers, heads, head_dim, h.config.pools.int8_group_tokens, int8_blocks);
    if (!g) setup_failed("int8 geometry", g.error());
    auto segment = shm::create_int8_pool_segment(segment_name(id, shm::SegmentKind::kInt8Pool), *g, kEpoch, id);
    if (!segment) setup_failed("int8 segment", segment.error());
    setup.int8.emplace(daemon::Int8Pool{std::move(*segment), *g});
  }
  h.channel->set_pool(std::move(setup));

  std::vector<std::uint32_t> open;            // sequence ids as the session gave them
  std::map<std::uint32_t, std::uint32_t> step;  // the client's step counter per sequence
  std::uint32_t next_sequence = 1;
  std::vector<shm::PlanRecord> plan_out(4);
  auto pick = [&](FuzzInput& input) -> std::uint32_t {
    const auto b = input.take<std::uint8_t>();
    if (open.empty() || b == 255) return b;  // sometimes a sequence the daemon does not know
    return open[b % open.size()];
  };
  for (int op = 0; op < 192 && !in.empty(); ++op) {
    switch (in.below<std::uint8_t>(10)) {
      case 0: {  // OpenSequence (validated by the session first)
        const std::uint32_t prompt = in.below<std::uint8_t>(64);
        auto params = tier_params(in, int8_blocks != 0);
        const std::uint32_t digest_dim = 1 + in.below<std::uint8_t>(16);
        if (!params || open.size() >= 8) break;
        h.channel->open_sequence(next_sequence, prompt, *params, digest_dim);
        open.push_back(next_sequence++);
        break;
      }
      case 1: {  // CloseSequence
        if (open.empty()) break;
        const std::size_t i = in.take<std::uint8_t>() % open.size();
        h.channel->close_sequence(open[i]);
        open.erase(open.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
      case 2: {  // a score record, then maybe the doorbell
        shm::ScoreRecord record{};
        record.sequence = pick(in);
        const auto kind = in.below<std::uint8_t>(8);  // 0..5 each ScoreKind, 6 as 0, 7 any value
        record.kind = kind == 7 ? in.take<std::uint16_t>() : kind % shm::kScoreKindCount;
        record.first_position = in.take<std::uint16_t>() % 1100;
        record.count = in.below<std::uint8_t>(64) == 63 ? in.take<std::uint16_t>() : in.below<std::uint8_t>(61);
        if (record.kind == static_cast<std::uint16_t>(shm::ScoreKind::kStepEnd)) {
          record.count = 0;
          record.step = in.flag() ? in.take<std::uint32_t>() : step[record.sequence]++;
        }
        const std::size_t n = std::min<std::size_t>(record.count, shm::kScoresPerRecord);
        for (std::size_t i = 0; i < n; ++i) record.values[i] = score_value(in.take<std::uint8_t>());
        (void)h.scores->push(record);
        if (in.flag()) h.channel->service();
        break;
      }
      case 3: h.channel->service(); break;
      case 4: {  // the client executes what it got and acks (or fails) each complete epoch, newest first
        auto popped = h.plans->pop(plan_out);
        const bool ack = in.flag();
        if (!popped || *popped == 0) break;
        for (std::size_t i = *popped; i-- > 0;) {
          if ((plan_out[i].flags & shm::kPlanLast) == 0) continue;
          (void)(ack ? h.plans->ack(plan_out[i].epoch) : h.plans->fail(plan_out[i].epoch));
        }
        h.channel->service();
        break;
      }
      case 5: {  // raw client write into its control segment (header and block included)
        const std::size_t at = in.take<std::uint16_t>() % h.control.size();
        const auto bytes = in.bytes(1 + in.below<std::uint8_t>(16));
        std::memcpy(h.control.data() + at, bytes.data(), std::min(bytes.size(), h.control.size() - at));
        break;
      }
      case 6: {  // raw client write into its pool rows (the daemon quantizes T1 rows it demotes)
        const std::size_t at = in.take<std::uint32_t>() % h.pool.size();
        const auto bytes = in.bytes(1 + in.below<std::uint8_t>(32));
        std::memcpy(h.pool.data() + at, bytes.data(), std::min(bytes.size(), h.pool.size() - at));
        break;
      }
      case 7: {  // ExportSequence: the first n positions, or a list from the input
        const std::uint32_t sequence = pick(in);
        std::vector<std::pair<std::uint32_t, std::uint32_t>> t0;
        const std::uint32_t n = in.below<std::uint8_t>(96);
        if (in.flag()) {
          for (std::uint32_t p = 0; p < n; ++p) t0.emplace_back(p, p);
        } else {
          std::uint32_t p = 0;
          for (std::uint32_t i = 0; i < n % 8; ++i) t0.emplace_back(p += 1 + in.below<std::uint8_t>(8), i);
        }
        (void)h.channel->freeze(sequence, t0);
        (void)h.channel->needs(sequence);
        break;
      }
      case 8: {  // kvtierctl status
        const daemon::ClientSnapshot s = h.channel->snapshot();
        if (s.pool_slots_used > slots) fail("more pool slots used than the pool has");
        for (const daemon::SequenceSnapshot& q : s.sequences) {
          if (q.tokens != q.tokens_t0 + q.tokens_t1 + q.tokens_t2) fail("a sequence's live tokens do not add up");
        }
        break;
      }
      default: {  // the client scribbles on a ring counter
        auto* score = reinterpret_cast<shm::ScoreRingHeader*>(h.control.data() + h.layout->block().score_ring_offset);
        auto* plan = reinterpret_cast<shm::PlanRingHeader*>(h.control.data() + h.layout->block().plan_ring_offset);
        const auto value = in.take<std::uint64_t>() % 64;
        switch (in.below<std::uint8_t>(4)) {
          case 0: score->producer.write.fetch_add(value); break;
          case 1: plan->consumer.ack_write.fetch_add(value); break;
          case 2: plan->acks[value % shm::kPlanAckSlots].outcome = static_cast<std::uint32_t>(value); break;
          default: plan->consumer.read.fetch_add(value); break;
        }
        h.channel->service();
        break;
      }
    }
  }
  h.channel->abandon_handoffs();
  h.channel.reset();
  return 0;
}
