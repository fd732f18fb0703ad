// The byte format of the structured fuzz targets' inputs, shared by the fuzzers (FuzzInput
// reads) and the seed generator (SeedWriter writes), so a seed is built with the same calls a
// fuzzer uses to take it apart.
//
// Values are little-endian and read front to back; an exhausted input reads as zeros (so every
// input is valid and a truncated one simply stops early). Thread-safety: plain values.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace kvtier::fuzz {

class FuzzInput {
 public:
  FuzzInput(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  bool empty() const noexcept { return pos_ >= size_; }
  std::size_t remaining() const noexcept { return size_ - pos_; }

  // The next sizeof(T) bytes as T (zero-filled past the end).
  template <class T>
    requires std::is_trivially_copyable_v<T>
  T take() noexcept {
    T value{};
    const std::size_t n = std::min(sizeof(T), remaining());
    if (n != 0) std::memcpy(&value, data_ + pos_, n);
    pos_ += n;
    return value;
  }

  // A value in [0, bound) (bound > 0), from one T.
  template <class T>
  T below(T bound) noexcept {
    return static_cast<T>(take<T>() % bound);
  }

  bool flag() noexcept { return (take<std::uint8_t>() & 1) != 0; }

  // Up to n bytes (fewer at the end).
  std::span<const std::uint8_t> bytes(std::size_t n) noexcept {
    n = std::min(n, remaining());
    std::span<const std::uint8_t> out(data_ + pos_, n);
    pos_ += n;
    return out;
  }

  // Everything left.
  std::span<const std::uint8_t> rest() noexcept { return bytes(remaining()); }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

class SeedWriter {
 public:
  template <class T>
    requires std::is_trivially_copyable_v<T>
  SeedWriter& put(T value) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&value);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
    return *this;
  }
  SeedWriter& put_bytes(std::span<const std::uint8_t> bytes) {
    bytes_.insert(bytes_.end(), bytes.begin(), bytes.end());
    return *this;
  }
  SeedWriter& put_text(const std::string& text) {
    bytes_.insert(bytes_.end(), text.begin(), text.end());
    return *this;
  }
  const std::vector<std::uint8_t>& bytes() const noexcept { return bytes_; }

 private:
  std::vector<std::uint8_t> bytes_;
};

}  // namespace kvtier::fuzz
