// Validation of copy lists, shared by every executor backend.
#include "kvtier/kernels/copy_plan.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace kvtier::kernels {

std::string_view direction_name(Direction direction) noexcept {
  switch (direction) {
    case Direction::kOffload:
      return "offload";
    case Direction::kRestore:
      return "restore";
  }
  return "unknown";
}

Status validate_copies(const KvLayout& layout, const PoolView& pool, Direction direction,
                       std::span<const RowCopy> copies) {
  const std::string what = std::string(direction_name(direction)) + ": copy ";
  for (std::size_t i = 0; i < copies.size(); ++i) {
    if (copies[i].hbm_slot >= layout.num_slots) {
      return make_error(Errc::kInvalidArgument, what + std::to_string(i) + " hbm_slot " +
                                                    std::to_string(copies[i].hbm_slot) +
                                                    " >= num_slots " +
                                                    std::to_string(layout.num_slots));
    }
    if (copies[i].pool_slot >= pool.slots) {
      return make_error(Errc::kInvalidArgument, what + std::to_string(i) + " pool_slot " +
                                                    std::to_string(copies[i].pool_slot) +
                                                    " >= pool slots " + std::to_string(pool.slots));
    }
  }
  // Two copies into one destination would make the result depend on execution order.
  std::vector<std::uint32_t> destinations;
  destinations.reserve(copies.size());
  for (const RowCopy& copy : copies) {
    destinations.push_back(direction == Direction::kOffload ? copy.pool_slot : copy.hbm_slot);
  }
  std::sort(destinations.begin(), destinations.end());
  if (auto dup = std::adjacent_find(destinations.begin(), destinations.end());
      dup != destinations.end()) {
    return make_error(Errc::kInvalidArgument,
                      what + "destination " +
                          (direction == Direction::kOffload ? "pool_slot " : "hbm_slot ") +
                          std::to_string(*dup) + " appears more than once");
  }
  return {};
}

}  // namespace kvtier::kernels
