#include "int8_demotion.hpp"

#include <string>
#include <vector>

namespace kvtier::daemon {

Status quantize_t2_blocks(const tier::PlanTransaction& transaction, const shm::PoolView& ddr,
                          const shm::Int8PoolView& int8, const kernels::Int8Geometry& geometry) {
  const std::span<const tier::PlannedMove> moves = transaction.planned();
  const std::uint32_t group = int8.geometry().group_tokens;
  std::vector<std::uint32_t> sources;
  std::vector<const std::byte*> rows;
  for (const tier::T2Block& block : transaction.t2_blocks()) {
    // The block's rows are the next `rows` moves into T2 from first_move on, in order.
    sources.clear();
    for (std::size_t i = block.first_move; sources.size() < block.rows && i < moves.size(); ++i) {
      if (moves[i].to != tier::Tier::kT2) continue;
      if (moves[i].from != tier::Tier::kT1) {
        return make_error(Errc::kInternal, "move into T2 at position " + std::to_string(moves[i].position) +
                                               " does not come from T1");
      }
      sources.push_back(moves[i].source_slot);
    }
    if (sources.size() != block.rows) return make_error(Errc::kInternal, "T2 block with fewer moves than rows");
    rows.resize(sources.size());
    for (std::uint32_t layer = 0; layer < ddr.geometry().num_layers; ++layer) {
      for (std::size_t r = 0; r < sources.size(); ++r) rows[r] = ddr.row(layer, sources[r]).data();
      if (auto ok = kernels::quantize_block(geometry, rows, int8.block(layer, block.first_slot / group)); !ok) {
        return ok;
      }
    }
  }
  return {};
}

}  // namespace kvtier::daemon
