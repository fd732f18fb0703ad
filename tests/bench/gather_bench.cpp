// gather_rows: CPU staging of scattered 512 B rows — 16,384 distinct slots in random order out of
// a 65,536-row (32 MiB) pool — into a dense staging buffer with kernels::gather_rows vs a plain
// memcpy loop over the same rows in the same order (goal C6, research/perf-anchors.md §9).
// The two alternate in each repeat (order flips every repeat); medians are compared.
// Ratio = memcpy-loop time / gather time, so above 1 means gather_rows is faster.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "harness.hpp"
#include "kvtier/kernels/gather.hpp"

namespace kvtier::bench {
namespace {

constexpr std::size_t kRowBytes = 512;
constexpr std::uint32_t kPoolRows = 65'536;
constexpr std::uint32_t kGatherRows = 16'384;

std::vector<std::uint32_t> random_slots() {
  std::vector<std::uint32_t> slots(kPoolRows);
  std::iota(slots.begin(), slots.end(), 0u);
  std::mt19937_64 rng(7);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(kGatherRows);
  return slots;
}

void memcpy_loop(std::byte* dst, const std::byte* pool, std::span<const std::uint32_t> slots) {
  for (std::size_t i = 0; i < slots.size(); ++i) {
    std::memcpy(dst + i * kRowBytes, pool + std::size_t{slots[i]} * kRowBytes, kRowBytes);
  }
}

Status run(const RunConfig& config, Reporter& reporter) {
  std::vector<std::byte> pool(std::size_t{kPoolRows} * kRowBytes);
  for (std::size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<std::byte>(i * 131u >> 3);
  std::vector<std::byte> staged_gather(std::size_t{kGatherRows} * kRowBytes);
  std::vector<std::byte> staged_loop(staged_gather.size());
  const std::vector<std::uint32_t> slots = random_slots();

  const auto time_gather = [&] {
    const auto start = Clock::now();
    kernels::gather_rows(staged_gather.data(), pool.data(), kRowBytes, slots);
    const auto end = Clock::now();
    do_not_optimize(staged_gather[0]);
    return seconds_between(start, end);
  };
  const auto time_loop = [&] {
    const auto start = Clock::now();
    memcpy_loop(staged_loop.data(), pool.data(), slots);
    const auto end = Clock::now();
    do_not_optimize(staged_loop[0]);
    return seconds_between(start, end);
  };

  time_gather();  // warm-up: page faults of both destinations, code
  time_loop();
  if (std::memcmp(staged_gather.data(), staged_loop.data(), staged_gather.size()) != 0) {
    return make_error(Errc::kInternal, "gather_rows: result differs from the memcpy loop");
  }
  const int repeats = config.quick ? 31 : 401;
  std::vector<double> gather_seconds;
  std::vector<double> loop_seconds;
  for (int r = 0; r < repeats; ++r) {
    if (r % 2 == 0) {
      gather_seconds.push_back(time_gather());
      loop_seconds.push_back(time_loop());
    } else {
      loop_seconds.push_back(time_loop());
      gather_seconds.push_back(time_gather());
    }
  }
  const double gather_us = median(gather_seconds) * 1e6;
  const double loop_us = median(loop_seconds) * 1e6;
  char note[128];
  std::snprintf(note, sizeof(note), "%u rows x %zu B of %u, %d repeats; gather %.2f GB/s",
                kGatherRows, kRowBytes, kPoolRows, repeats,
                static_cast<double>(kGatherRows * kRowBytes) / (gather_us * 1e3));
  reporter.progress("gather_rows", note);
  reporter.report(Measure{"gather_rows", gather_us > 0 ? loop_us / gather_us : 0.0,
                          Figure{"gather", gather_us, "us"}, Figure{"memcpy_loop", loop_us, "us"},
                          ">=0.8"});
  return {};
}

}  // namespace

void register_gather(Registry& registry) {
  registry.add("gather_rows",
               "kernels::gather_rows of 16,384 random 512 B rows from a 32 MiB pool vs a plain "
               "memcpy loop over the same rows",
               run);
}

}  // namespace kvtier::bench
