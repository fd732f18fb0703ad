// KVTIER_CHECK: the one contract check, on in every build type (NDEBUG does not remove it).
//
// A failed check is a kvtier bug (a broken invariant or precondition inside the process), never
// bad input: what an OS, a peer or a client can get wrong returns kvtier::Result instead
// (error.hpp). On failure it writes "file:line: check failed: <condition>: <message>" to stderr
// and aborts. Use it instead of assert(), which every build the project runs compiles out.
// KVTIER_FAIL(message) is the unconditional form, for a point that must not be reached (it is
// [[noreturn]], so it can end a function that returns a value).
// `message` is a string literal (or any const char*). Host code only; not for CUDA device code.
// Thread-safety: may fail from any thread; the report is a single write.
#pragma once

namespace kvtier::detail {

[[noreturn]] void check_failed(const char* file, int line, const char* condition,
                               const char* message) noexcept;

}  // namespace kvtier::detail

#define KVTIER_CHECK(condition, message)                                           \
  do {                                                                             \
    if (!(condition)) [[unlikely]] {                                               \
      ::kvtier::detail::check_failed(__FILE__, __LINE__, #condition, (message));  \
    }                                                                              \
  } while (false)

#define KVTIER_FAIL(message) \
  ::kvtier::detail::check_failed(__FILE__, __LINE__, "unreachable", (message))
