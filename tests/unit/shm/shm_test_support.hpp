// Helpers for the shm unit tests: aligned ring buffers and per-test unique segment names.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>

namespace kvtier::shm::testing {

// Zeroed, 64-byte aligned heap bytes with a ring header constructed at the start.
template <class Header>
class RingBuffer {
 public:
  explicit RingBuffer(std::size_t bytes)
      : bytes_(bytes), data_(static_cast<std::byte*>(std::aligned_alloc(64, round(bytes)))) {
    std::memset(data_.get(), 0, round(bytes));
    new (data_.get()) Header{};
  }
  std::span<std::byte> span() const { return {data_.get(), bytes_}; }
  Header& header() const { return *reinterpret_cast<Header*>(data_.get()); }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  static std::size_t round(std::size_t n) { return (n + 63) / 64 * 64; }
  std::size_t bytes_;
  std::unique_ptr<std::byte, Free> data_;
};

// Segment prefix unique to this process and test, so `ctest -j` never shares a name.
inline std::string unique_prefix() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  // Appended piecewise: GCC 12 at -O3 reports a false -Wrestrict on "t" + std::string.
  std::string prefix = "t";
  prefix += std::to_string(::getpid());
  prefix += '-';
  prefix += info->name();
  for (char& c : prefix) {
    if (c == '/' || c == '.') c = '_';
  }
  return prefix.substr(0, 64);
}

inline std::string unique_name(const std::string& suffix = "seg") {
  return "/kvtier-test." + unique_prefix() + "." + suffix;
}

}  // namespace kvtier::shm::testing
