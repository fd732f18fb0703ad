// IpcHandle <-> hex text, for passing a handle to the peer process on its command line.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kvtier/kernels/cuda/ipc_cache.hpp"

namespace kvtier::kernels::cuda::testing {

inline std::string to_hex(const IpcHandle& handle) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const std::byte b : handle) {
    out += kDigits[static_cast<unsigned>(b) >> 4];
    out += kDigits[static_cast<unsigned>(b) & 15u];
  }
  return out;
}

inline std::optional<IpcHandle> from_hex(std::string_view text) {
  if (text.size() != 2 * kIpcHandleBytes) return std::nullopt;
  const auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  IpcHandle handle{};
  for (std::size_t i = 0; i < kIpcHandleBytes; ++i) {
    const int hi = digit(text[2 * i]), lo = digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    handle[i] = static_cast<std::byte>(hi * 16 + lo);
  }
  return handle;
}

}  // namespace kvtier::kernels::cuda::testing
