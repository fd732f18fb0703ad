// Fuzz target: the shared-memory readers (shm/) over segments the fuzzer plays the client of.
//
// A control segment is built in heap memory exactly as create_control_segment lays it out
// (SegmentHeader, ControlBlock, both ring headers), allocated to its exact size so that
// AddressSanitizer flags any read past it. The daemon's views (ScoreConsumer, PlanProducer) and
// an honest client's views (ScoreProducer, PlanConsumer) share it; the input is a program of
// operations: client writes of arbitrary bytes anywhere in the segment ("every byte is
// client-writable", LAYOUT.md), honest client pushes, acks and pops, and the daemon's pops,
// pushes, ack reads, sleep announcements and re-validations (read_control_layout,
// validate_segment_header). Pool and int8 pool segments get the same treatment for
// PoolView::validate / Int8PoolView::validate.
//
// Input (fuzz_input.hpp): u8 segment kind (% 3: control, pool, int8 pool), then
//   control: u8 capacities (score 2^(b & 3), plan 2^((b >> 2) & 3)), then operations, each a u8
//            opcode and its operands (see run_control below);
//   pool:    u8 layers-1 (% 4), u8 heads-1 (% 4), u8 head_dim-1 (% 64), u8 dtype bytes-1 (% 8 for
//            pool; int8: group-1 % 64), u8 slots or blocks-1 (% 16), u8 slack bytes, then pokes.
//
// Beyond "no crash, no sanitizer report": a pop returns at most what was asked, with every
// score record's count <= kScoresPerRecord and every plan record's move_count <=
// kMovesPerRecord; an accepted acknowledgement names a published epoch (1 ..
// published_epoch()) and an outcome that is a PlanOutcome;
// free slots never exceed the capacity; an accepted control layout or pool block lies inside
// the segment.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <vector>

#include "fuzz_input.hpp"
#include "kvtier/shm/control_segment.hpp"
#include "kvtier/shm/int8_pool_segment.hpp"
#include "kvtier/shm/mapping.hpp"
#include "kvtier/shm/pool_segment.hpp"

namespace {

using kvtier::fuzz::FuzzInput;
namespace shm = kvtier::shm;

constexpr std::uint64_t kEpoch = 0x1234;
constexpr std::uint32_t kClientId = 7;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "shm_rings_fuzz: property violated: %s\n", what);
  std::abort();
}

// A zeroed, 64-byte aligned heap block of exactly `size` bytes.
struct Buffer {
  explicit Buffer(std::size_t n) : size(n), data(static_cast<std::byte*>(::operator new(n, std::align_val_t{64}))) {
    std::memset(data, 0, n);
  }
  ~Buffer() { ::operator delete(data, std::align_val_t{64}); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::span<std::byte> bytes() const { return {data, size}; }
  std::size_t size;
  std::byte* data;
};

void write_header(const Buffer& segment, shm::SegmentKind kind) {
  auto* header = new (segment.data) shm::SegmentHeader{};
  header->magic = shm::kSegmentMagic;
  header->layout_version = shm::kLayoutVersion;
  header->kind = kind;
  header->header_size = sizeof(shm::SegmentHeader);
  header->segment_size = segment.size;
  header->layout_fingerprint = shm::kLayoutFingerprint;
  header->daemon_epoch = kEpoch;
  header->client_id = kClientId;
  header->ready.store(1, std::memory_order_release);
}

// A client write: `len` input bytes at an offset into one region of the segment.
void poke(FuzzInput& in, const Buffer& segment, std::span<const std::pair<std::size_t, std::size_t>> regions) {
  const auto& [base, size] = regions[in.below<std::uint8_t>(static_cast<std::uint8_t>(regions.size()))];
  const std::size_t offset = base + in.take<std::uint16_t>() % size;
  const auto data = in.bytes(1 + in.below<std::uint8_t>(32));
  std::memcpy(segment.data + offset, data.data(), std::min(data.size(), segment.size - offset));
}

void run_control(FuzzInput& in) {
  const auto caps = in.take<std::uint8_t>();
  auto layout = shm::ControlLayout::make(1u << (caps & 3), 1u << ((caps >> 2) & 3));
  if (!layout) fail("ControlLayout::make refused valid capacities");
  const shm::ControlBlock& block = layout->block();
  Buffer segment(layout->bytes());
  write_header(segment, shm::SegmentKind::kControl);
  std::memcpy(segment.data + sizeof(shm::SegmentHeader), &block, sizeof(block));
  auto ring = [&](std::uint64_t offset, std::uint64_t bytes) { return segment.bytes().subspan(offset, bytes); };
  const auto score_ring = ring(block.score_ring_offset, block.score_ring_bytes);
  const auto plan_ring = ring(block.plan_ring_offset, block.plan_ring_bytes);
  new (score_ring.data()) shm::ScoreRingHeader{};
  new (plan_ring.data()) shm::PlanRingHeader{};

  shm::ScoreConsumer scores(score_ring, block.score_capacity);  // daemon
  shm::PlanProducer plans(plan_ring, block.plan_capacity);       // daemon
  shm::ScoreProducer client_scores(score_ring, block.score_capacity);
  shm::PlanConsumer client_plans(plan_ring, block.plan_capacity);

  // Client-writable regions: the whole segment, then the lines and slots a client would aim at.
  const std::pair<std::size_t, std::size_t> regions[] = {
      {0, segment.size},
      {block.score_ring_offset, 64},                                                  // score producer line
      {block.score_ring_offset + sizeof(shm::ScoreRingHeader), block.score_ring_bytes - sizeof(shm::ScoreRingHeader)},
      {block.plan_ring_offset + 64, 64},                                              // plan consumer line
      {sizeof(shm::SegmentHeader), sizeof(shm::ControlBlock)},
      {0, sizeof(shm::SegmentHeader)},
      {block.plan_ring_offset + 128, sizeof(shm::PlanRingHeader::acks)},  // plan ack slots
  };

  std::uint64_t next_epoch = 1, open_epoch = 0, consumed = 0;
  std::vector<shm::ScoreRecord> score_out(8);
  std::vector<shm::PlanRecord> plan_out(4);
  std::vector<shm::PlanAck> acks(shm::kPlanAckSlots);
  for (int step = 0; step < 256 && !in.empty(); ++step) {
    switch (in.below<std::uint8_t>(12)) {
      case 0: poke(in, segment, regions); break;
      case 1: {  // honest client: one score record
        shm::ScoreRecord record{};
        record.sequence = in.take<std::uint32_t>();
        record.first_position = in.take<std::uint32_t>();
        record.count = in.take<std::uint16_t>();
        record.kind = in.take<std::uint16_t>();
        record.step = in.take<std::uint32_t>();
        (void)client_scores.push(record);
        break;
      }
      case 2: {  // daemon drains scores
        const std::size_t want = 1 + in.below<std::uint8_t>(8);
        auto popped = scores.pop(std::span(score_out).first(want));
        if (!popped) break;  // the daemon would end the session; keep poking at it anyway
        if (*popped > want) fail("score pop returned more than asked");
        for (std::size_t i = 0; i < *popped; ++i) {
          if (score_out[i].count > shm::kScoresPerRecord) fail("score pop passed a record with count > 60");
        }
        if (scores.consumed() != consumed + *popped) fail("score consumer counter moved by other than the pop");
        consumed = scores.consumed();
        break;
      }
      case 3:
        if (scores.announce_sleep()) scores.cancel_sleep();
        if (plans.announce_sleep()) plans.cancel_sleep();
        break;
      case 4: {  // daemon publishes a plan record (its own preconditions kept)
        shm::PlanRecord record{};
        record.move_count = in.below<std::uint8_t>(shm::kMovesPerRecord + 1);
        record.sequence = in.take<std::uint32_t>();
        const bool last = in.flag();
        record.epoch = open_epoch != 0 ? open_epoch : next_epoch;
        record.flags = last ? shm::kPlanLast : 0;
        if (plans.free_slots() > plans.capacity()) fail("plan free_slots beyond capacity");
        if (plans.push(record)) {
          open_epoch = last ? 0 : record.epoch;
          if (last) ++next_epoch;
        }
        break;
      }
      case 5: {  // daemon reads the client's acknowledgements
        auto popped = plans.pop_acks(acks);
        if (!popped) break;
        if (*popped > acks.size()) fail("pop_acks returned more than asked");
        for (std::size_t i = 0; i < *popped; ++i) {
          if (acks[i].epoch == 0 || acks[i].epoch > plans.published_epoch()) fail("pop_acks accepted a bad epoch");
          if (acks[i].outcome != 1 && acks[i].outcome != 2) fail("pop_acks accepted a bad outcome");
        }
        break;
      }
      case 6: {  // honest client pops plans and acks or fails the newest epoch seen
        auto popped = client_plans.pop(std::span(plan_out).first(1 + in.below<std::uint8_t>(4)));
        if (popped && *popped > 0) {
          const shm::PlanRecord& r = plan_out[*popped - 1];
          if (r.move_count > shm::kMovesPerRecord) fail("plan pop passed a record with move_count > 63");
          const bool ack = in.flag();
          if ((r.flags & shm::kPlanLast) != 0) (void)(ack ? client_plans.ack(r.epoch) : client_plans.fail(r.epoch));
        }
        break;
      }
      case 7: {  // client writes raw counters
        auto& h = *reinterpret_cast<shm::PlanRingHeader*>(plan_ring.data());
        const auto value = in.take<std::uint64_t>();
        switch (in.below<std::uint8_t>(4)) {
          case 0: h.consumer.ack_write.store(value); break;
          case 1: h.acks[value % shm::kPlanAckSlots].epoch = value; break;
          case 2: h.consumer.read.store(value); break;
          default: reinterpret_cast<shm::ScoreRingHeader*>(score_ring.data())->producer.write.store(value); break;
        }
        break;
      }
      case 8: {  // re-validation of the control block, as a client (or an adopting daemon) does it
        auto read = shm::read_control_layout(segment.bytes());
        if (!read) break;
        const shm::ControlBlock& b = read->block();
        if (b.plan_ring_offset + b.plan_ring_bytes > segment.size || b.score_ring_offset + b.score_ring_bytes > segment.size) {
          fail("read_control_layout accepted rings beyond the segment");
        }
        shm::ScoreConsumer view(segment.bytes().subspan(b.score_ring_offset, b.score_ring_bytes), b.score_capacity);
        (void)view.pop(std::span(score_out).first(1));
        break;
      }
      case 9: {
        const auto kind = static_cast<shm::SegmentKind>(in.below<std::uint8_t>(4));
        (void)shm::validate_segment_header(segment.bytes(), in.flag() ? std::optional(kind) : std::nullopt,
                                           in.flag() ? kEpoch : 0);
        break;
      }
      case 10: {  // an adopting daemon resumes from the counters in shared memory
        shm::ScoreConsumer adopted_scores(score_ring, block.score_capacity);
        (void)adopted_scores.pop(std::span(score_out).first(1));
        shm::PlanProducer adopted_plans(plan_ring, block.plan_capacity);
        if (adopted_plans.free_slots() > adopted_plans.capacity()) fail("adopted free_slots beyond capacity");
        (void)adopted_plans.pop_acks(std::span(acks).first(1));
        break;
      }
      default:
        if (scores.dropped() != 0 && client_scores.free_slots() > client_scores.capacity()) {
          fail("score free_slots beyond capacity");
        }
        break;
    }
  }
}

template <class View, class Block>
void run_pool(FuzzInput& in, bool int8) {
  const std::uint32_t layers = 1u + in.below<std::uint8_t>(4), heads = 1u + in.below<std::uint8_t>(4);
  const std::uint32_t dim = 1u + in.below<std::uint8_t>(64);
  const std::uint32_t fifth = 1u + in.below<std::uint8_t>(int8 ? 64 : 8);
  const std::uint32_t count = 1u + in.below<std::uint8_t>(16);
  const std::size_t slack = in.take<std::uint8_t>();
  Block block{};
  if constexpr (std::is_same_v<Block, shm::PoolBlock>) {
    auto g = shm::make_pool_geometry(layers, heads, dim, fifth, count);
    if (!g) return;
    block.geometry = *g;
  } else {
    auto g = shm::make_int8_pool_geometry(layers, heads, dim, fifth, count);
    if (!g) return;
    block.geometry = *g;
  }
  block.rows_offset = shm::kPoolRowsOffset;
  block.rows_bytes = block.geometry.total_bytes();
  // Odd sizes on purpose (slack): validation must use the true size, never a rounded one.
  Buffer segment(shm::kPoolRowsOffset + block.rows_bytes + slack);
  write_header(segment, int8 ? shm::SegmentKind::kInt8Pool : shm::SegmentKind::kPool);
  std::memcpy(segment.data + sizeof(shm::SegmentHeader), &block, sizeof(block));
  const std::pair<std::size_t, std::size_t> regions[] = {{sizeof(shm::SegmentHeader), sizeof(Block)}};
  while (!in.empty()) poke(in, segment, regions);
  auto view = View::validate(segment.bytes());
  if (!view) return;
  const auto rows = view->rows();
  if (rows.data() < segment.data || rows.data() + rows.size() > segment.data + segment.size) {
    fail("a pool view accepted rows beyond the segment");
  }
  const auto& g = view->geometry();
  if constexpr (std::is_same_v<Block, shm::PoolBlock>) {
    auto last = view->row(g.num_layers - 1, g.slots - 1);
    if (last.data() + last.size() > rows.data() + rows.size()) fail("the last pool row lies beyond the rows");
    std::memset(view->row(0, 0).data(), 1, view->row(0, 0).size());
    std::memset(last.data(), 1, last.size());
  } else {
    auto last = view->block(g.num_layers - 1, g.blocks - 1);
    if (last.data() + last.size() > rows.data() + rows.size()) fail("the last int8 block lies beyond the rows");
    std::memset(last.data(), 1, last.size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  switch (in.below<std::uint8_t>(3)) {
    case 0: run_control(in); break;
    case 1: run_pool<shm::PoolView, shm::PoolBlock>(in, false); break;
    default: run_pool<shm::Int8PoolView, shm::Int8PoolBlock>(in, true); break;
  }
  return 0;
}
