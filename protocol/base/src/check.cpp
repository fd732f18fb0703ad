// KVTIER_CHECK's failure path (check.hpp).
#include "kvtier/base/check.hpp"

#include <cstdio>
#include <cstdlib>

namespace kvtier::detail {

void check_failed(const char* file, int line, const char* condition,
                  const char* message) noexcept {
  // One fprintf to unbuffered stderr, so concurrent failures do not interleave mid-line.
  std::fprintf(stderr, "%s:%d: check failed: %s: %s\n", file, line, condition,
               message != nullptr ? message : "");
  std::abort();
}

}  // namespace kvtier::detail
