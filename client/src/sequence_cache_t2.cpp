// SequenceCache's T2 (int8) paths: restoring T2 tokens into the engine's cache and staging
// layers whose host rows include T2 rows. Both dequantize on the CPU (kernels::dequantize_block
// through Int8Rows); the GPU dequantize path is issue #4.
#include <cstring>
#include <string>

#include "sequence_cache.hpp"

namespace kvtier::client {
namespace {

Status require_cpu(const kernels::CopyExecutor& executor) {
  if (executor.backend() == kernels::Backend::kCpu) return {};
  return make_error(Errc::kBadState, "T2 rows need the CPU backend until the GPU dequantize path is wired (issue #4)");
}

}  // namespace

Status SequenceCache::prepare_t2_restores(std::span<const kernels::RowCopy> copies, std::span<const std::uint32_t> slots) {
  if (copies.empty()) return {};
  if (auto ok = require_cpu(*executor_); !ok) return ok;
  // Scratch pool: layer l, row i = int8 slot slots[i] dequantized; restored like T1 rows.
  const auto n = static_cast<std::uint32_t>(slots.size());
  restore_scratch_.resize(std::size_t{n} * row_bytes_ * layout_.num_layers);
  const kernels::PoolView scratch{restore_scratch_.data(), row_bytes_, std::size_t{n} * row_bytes_, n,
                                  layout_.num_layers};
  if (auto ok = kernels::validate_copies(layout_, scratch, kernels::Direction::kRestore, copies); !ok) return ok;
  std::vector<std::byte*> out(n);
  for (std::uint32_t layer = 0; layer < layout_.num_layers; ++layer) {
    for (std::uint32_t i = 0; i < n; ++i) out[i] = scratch.row(layer, i);
    if (auto ok = int8_->dequantize(layer, slots, out); !ok) return ok;
  }
  if (!restore_executor_) {
    auto made = kernels::make_executor(kernels::Backend::kCpu);
    if (!made) return tl::unexpected(made.error());
    restore_executor_ = std::move(*made);
  }
  return restore_executor_->initialize(layout_, scratch);
}

Status SequenceCache::restore_t2(std::span<const kernels::RowCopy> copies) {
  if (copies.empty()) return {};
  return restore_executor_->restore(copies);
}

Result<kvtier_staged_layer> SequenceCache::stage_merged(std::uint32_t layer, void* buffer, std::size_t capacity) {
  if (auto ok = require_cpu(*executor_); !ok) return tl::unexpected(ok.error());
  const std::size_t rows = list_slots_.size();
  if (layer >= layout_.num_layers) {
    return make_error(Errc::kInvalidArgument, "stage: layer " + std::to_string(layer) + " >= num_layers " +
                                                  std::to_string(layout_.num_layers));
  }
  if (buffer == nullptr || capacity < rows * row_bytes_) {
    return make_error(Errc::kInvalidArgument, "stage: " + std::to_string(rows) + " rows need " +
                                                  std::to_string(rows * row_bytes_) + " bytes, the buffer has " +
                                                  std::to_string(buffer == nullptr ? 0 : capacity));
  }
  if (auto ok = int8_->dequantize(layer, t2_slots_, t2_out_); !ok) return tl::unexpected(ok.error());
  // Staging layout as the executor's (staging.hpp): K of every row, then V of every row.
  const std::size_t half = row_bytes_ / 2;
  auto* k = static_cast<std::byte*>(buffer);
  std::byte* v = k + rows * half;
  for (std::size_t i = 0, t2 = 0; i < rows; ++i) {
    const std::byte* src = list_t2_[i] != 0 ? t2_out_[t2++] : pool_.row(layer, list_slots_[i]);
    std::memcpy(k + i * half, src, half);
    std::memcpy(v + i * half, src + half, half);
  }
  return kvtier_staged_layer{layer, rows, list_positions_.data(), k, v};
}

}  // namespace kvtier::client
