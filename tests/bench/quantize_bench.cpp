// quantize_int8 / dequantize_int8 (goal C7, research/perf-anchors.md §9): the T2 int8 tier's CPU
// path, kernels::quantize_rows (bf16 rows -> int8 blocks) and kernels::dequantize_rows (back),
// single thread, vs a single-thread memcpy of the same bf16 bytes, measured in the same run.
//
// Size: one layer of 4,096 tokens of a 4-KV-head x 128-dim model (R1-Distill-Qwen-7B-like),
// 2 KiB bf16 per row, 8 MiB of bf16 in all (4.6 MiB of int8 blocks, G = 32). Rates count the bf16
// bytes on both sides (read by quantize, written by dequantize), so each ratio is (bf16 bytes/s of
// the kernel) / (bytes/s of memcpy). The memcpy copies the same 8 MiB source into its own 8 MiB
// destination. The three alternate in each repeat (the order rotates); medians are compared.
// Inputs: heavy-tailed random values (a few outlier key channels), as the unit tests use.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "harness.hpp"
#include "kvtier/kernels/quantize.hpp"

namespace kvtier::bench {
namespace {

constexpr std::uint32_t kHeads = 4;
constexpr std::uint32_t kHeadDim = 128;
constexpr std::size_t kRows = 4096;

kernels::Int8Geometry geometry() {
  kernels::Int8Geometry g;
  g.num_kv_heads = kHeads;
  g.head_dim = kHeadDim;
  g.dtype = kernels::KvDtype::kBf16;
  return g;
}

// kRows bf16 rows: normal values, every 16th key channel scaled by 20 (outlier channels).
std::vector<std::byte> make_rows(const kernels::Int8Geometry& g) {
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::size_t elements = kRows * 2 * g.channels();
  std::vector<std::uint16_t> bits(elements);
  for (std::size_t i = 0; i < elements; ++i) {
    const std::size_t channel = i % (2 * g.channels());
    const float scale = channel < g.channels() && channel % 16 == 0 ? 20.0f : 1.0f;
    bits[i] = kernels::f32_to_bf16(normal(rng) * scale);
  }
  std::vector<std::byte> rows(elements * sizeof(std::uint16_t));
  std::memcpy(rows.data(), bits.data(), rows.size());
  return rows;
}

Status run(const RunConfig& config, Reporter& reporter) {
  const kernels::Int8Geometry g = geometry();
  const std::vector<std::byte> rows = make_rows(g);
  std::vector<std::byte> blocks(g.blocks_bytes(kRows));
  std::vector<std::byte> restored(rows.size());
  std::vector<std::byte> copied(rows.size());
  Status failed;

  const auto time_quantize = [&] {
    const auto start = Clock::now();
    const Status status = kernels::quantize_rows(g, rows, blocks);
    const auto end = Clock::now();
    if (!status) failed = status;
    do_not_optimize(blocks[0]);
    return seconds_between(start, end);
  };
  const auto time_dequantize = [&] {
    const auto start = Clock::now();
    const Status status = kernels::dequantize_rows(g, blocks, kRows, restored);
    const auto end = Clock::now();
    if (!status) failed = status;
    do_not_optimize(restored[0]);
    return seconds_between(start, end);
  };
  const auto time_memcpy = [&] {
    const auto start = Clock::now();
    std::memcpy(copied.data(), rows.data(), rows.size());
    const auto end = Clock::now();
    do_not_optimize(copied[0]);
    return seconds_between(start, end);
  };

  // Warm-up (page faults of the destinations), and a sanity check that the round trip is close.
  time_quantize();
  time_dequantize();
  time_memcpy();
  if (!failed) return failed;
  auto error = kernels::measure_error(g, rows, restored);
  if (!error) return tl::unexpected(error.error());
  if (!(error->keys.max_rel < 0.1 && error->values.max_rel < 0.1)) {
    return make_error(Errc::kInternal, "int8 round trip error out of range");
  }

  const int repeats = config.quick ? 7 : 41;
  std::vector<double> quantize_seconds;
  std::vector<double> dequantize_seconds;
  std::vector<double> memcpy_seconds;
  for (int r = 0; r < repeats; ++r) {
    for (int k = 0; k < 3; ++k) {
      switch ((r + k) % 3) {
        case 0: quantize_seconds.push_back(time_quantize()); break;
        case 1: dequantize_seconds.push_back(time_dequantize()); break;
        default: memcpy_seconds.push_back(time_memcpy()); break;
      }
    }
  }
  if (!failed) return failed;
  const auto bytes = static_cast<double>(rows.size());
  const double quantize_rate = bytes / median(quantize_seconds);
  const double dequantize_rate = bytes / median(dequantize_seconds);
  const double memcpy_rate = bytes / median(memcpy_seconds);
  char note[200];
  const std::string_view isa = kernels::int8_isa_name(kernels::int8_isa());
  std::snprintf(note, sizeof(note),
                "%zu rows x %u heads x %u dim bf16 (%.1f MiB), %d repeats; key max_rel %.4f, "
                "value max_rel %.4f; %.*s loops",
                kRows, kHeads, kHeadDim, bytes / (1 << 20), repeats, error->keys.max_rel,
                error->values.max_rel, static_cast<int>(isa.size()), isa.data());
  reporter.progress("quantize_int8", note);
  reporter.report(Measure{"quantize_int8", quantize_rate / memcpy_rate,
                          Figure{"quantize", quantize_rate / 1e9, "GB/s"},
                          Figure{"memcpy", memcpy_rate / 1e9, "GB/s"}, ">=0.5"});
  reporter.report(Measure{"dequantize_int8", dequantize_rate / memcpy_rate,
                          Figure{"dequantize", dequantize_rate / 1e9, "GB/s"},
                          Figure{"memcpy", memcpy_rate / 1e9, "GB/s"}, ">=0.5"});
  return {};
}

}  // namespace

void register_quantize(Registry& registry) {
  registry.add("quantize_int8",
               "kernels::quantize_rows / dequantize_rows of 4,096 bf16 rows (4 KV heads x 128) vs "
               "memcpy of the 8 MiB of bf16 (reports quantize_int8 and dequantize_int8)",
               run);
}

}  // namespace kvtier::bench
