// metadata_per_token: daemon bytes per managed token vs the 4-byte fp32 score itself (goal C8,
// research/perf-anchors.md §9: score, tier, slot, generation in ≤ 16 B).
//
//   metadata_per_token     SequenceTiers::metadata_bytes() / length() for a 1M-token sequence
//                          (heap capacity, not length, as the tier engine reports it).
//   metadata_per_t1_token  the same plus what a token in T1 adds: its SlotMap entry
//                          (SlotMap::bytes()) and its pool slot in a SlotAllocator. The allocator
//                          does not report its size, so its heap growth is measured with
//                          mallinfo2() around its construction and first use.
// Both sizes are deterministic; nothing is timed.
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <span>
#include <vector>

#include "harness.hpp"
#include "kvtier/tier/sequence_tiers.hpp"
#include "kvtier/tier/slot_allocator.hpp"
#include "kvtier/tier/slot_map.hpp"

namespace kvtier::bench {
namespace {

constexpr std::uint32_t kTokens = 1'000'000;
constexpr std::uint32_t kChunk = 4096;
constexpr double kScoreBytes = sizeof(float);

// Heap bytes in use: small-block arena plus mmap()ed blocks.
std::size_t heap_in_use() {
  const struct mallinfo2 info = ::mallinfo2();
  return info.uordblks + info.hblkhd;
}

// Grows a sequence to kTokens the way the daemon does: add_scores chunk by chunk.
Result<double> sequence_bytes_per_token() {
  auto sequence = tier::SequenceTiers::create(0, tier::TierParams{}, kTokens);
  if (!sequence) return tl::unexpected(sequence.error());
  const std::vector<float> chunk(kChunk, 0.5f);
  for (std::uint32_t first = 0; first < kTokens; first += kChunk) {
    const std::uint32_t n = std::min(kChunk, kTokens - first);
    if (auto status = sequence->add_scores(first, std::span<const float>(chunk.data(), n)); !status) {
      return tl::unexpected(status.error());
    }
  }
  return static_cast<double>(sequence->metadata_bytes()) / sequence->length();
}

double slot_map_bytes_per_token() {
  tier::SlotMap map;
  for (std::uint32_t position = 0; position < kTokens; ++position) map.set(position, position);
  return static_cast<double>(map.bytes()) / kTokens;
}

double slot_allocator_bytes_per_slot() {
  const std::size_t before = heap_in_use();
  tier::SlotAllocator allocator(kTokens);
  for (std::uint32_t i = 0; i < kTokens; ++i) do_not_optimize(allocator.allocate());
  const std::size_t after = heap_in_use();
  return after > before ? static_cast<double>(after - before) / kTokens : 0.0;
}

Status run(const RunConfig&, Reporter& reporter) {
  auto per_token = sequence_bytes_per_token();
  if (!per_token) return tl::unexpected(per_token.error());
  const double slot_map = slot_map_bytes_per_token();
  const double allocator = slot_allocator_bytes_per_slot();
  char note[160];
  std::snprintf(note, sizeof(note),
                "%u tokens: SequenceTiers %.2f B/token (declares %zu), SlotMap %.2f B, "
                "SlotAllocator %.2f B/slot",
                kTokens, *per_token, tier::SequenceTiers::kMetadataBytesPerToken, slot_map,
                allocator);
  reporter.progress("metadata_per_token", note);
  reporter.report(Measure{"metadata_per_token", *per_token / kScoreBytes,
                          Figure{"sequence_tiers", *per_token, "B/token"},
                          Figure{"score", kScoreBytes, "B/token"}, "<=4"});
  const double t1_token = *per_token + slot_map + allocator;
  reporter.report(Measure{"metadata_per_t1_token", t1_token / kScoreBytes,
                          Figure{"tiers+slot_map+slot_allocator", t1_token, "B/token"},
                          Figure{"score", kScoreBytes, "B/token"}, "<=4"});
  return {};
}

}  // namespace

void register_metadata(Registry& registry) {
  registry.add("metadata_per_token",
               "daemon bytes per managed token (SequenceTiers; + SlotMap + SlotAllocator for a "
               "T1 token) vs the 4-byte score",
               run);
}

}  // namespace kvtier::bench
