// Internal: contract checks that stay on in release builds. A violated precondition here is a
// daemon bug (never client input, which is validated and answered with a Status), so it aborts.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace kvtier::tier::detail {

[[noreturn]] inline void contract_failed(const char* what) noexcept {
  std::fputs("kvtier_tier: contract violated: ", stderr);
  std::fputs(what, stderr);
  std::fputs("\n", stderr);
  std::abort();
}

inline void require(bool condition, const char* what) noexcept {
  if (!condition) [[unlikely]] contract_failed(what);
}

}  // namespace kvtier::tier::detail
