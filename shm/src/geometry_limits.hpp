// The checks every pool geometry (DDR rows, int8 blocks) applies before it is used: each field
// in [1, its limit], and the total bytes — computed with overflow checks — within kMaxPoolBytes.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "kvtier/base/error.hpp"
#include "kvtier/shm/pool_geometry.hpp"

namespace kvtier::shm::detail {

struct FieldLimit {
  const char* name;
  std::uint32_t value;
  std::uint32_t max;
};

// kInvalidArgument "<what> <name> <value> is outside [1, <max>]" for the first field out of range.
inline Status check_fields(const char* what, std::initializer_list<FieldLimit> fields) {
  for (const FieldLimit& field : fields) {
    if (field.value == 0 || field.value > field.max) {
      return make_error(Errc::kInvalidArgument, std::string(what) + " " + field.name + " " +
                                                    std::to_string(field.value) + " is outside [1, " +
                                                    std::to_string(field.max) + "]");
    }
  }
  return {};
}

// kInvalidArgument "<what> of <layers> layers x <count> <counted> x <unit_bytes>-byte <units>
// exceeds ..." when layers * count * unit_bytes overflows or passes kMaxPoolBytes.
inline Status check_total(const char* what, std::uint32_t layers, std::uint32_t count, const char* counted,
                          std::uint64_t unit_bytes, const char* units) {
  std::uint64_t total = 0;
  if (!__builtin_mul_overflow(unit_bytes, std::uint64_t{count}, &total) &&
      !__builtin_mul_overflow(total, std::uint64_t{layers}, &total) && total <= kMaxPoolBytes) {
    return {};
  }
  return make_error(Errc::kInvalidArgument, std::string(what) + " of " + std::to_string(layers) + " layers x " +
                                                std::to_string(count) + " " + counted + " x " +
                                                std::to_string(unit_bytes) + "-byte " + units + " exceeds " +
                                                std::to_string(kMaxPoolBytes) + " bytes");
}

}  // namespace kvtier::shm::detail
