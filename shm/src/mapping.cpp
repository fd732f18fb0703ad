#include "kvtier/shm/mapping.hpp"

#include <sys/mman.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <string>

namespace kvtier::shm {
namespace {

std::string hex(std::uint64_t value) {
  char text[19];
  std::snprintf(text, sizeof(text), "0x%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::string kind_text(SegmentKind kind) {
  return std::to_string(static_cast<std::uint32_t>(kind)) + " (" + segment_kind_name(kind) + ")";
}

}  // namespace

Status validate_segment_header(std::span<const std::byte> segment,
                               std::optional<SegmentKind> expected_kind,
                               std::uint64_t expected_epoch) {
  using std::to_string;
  if (segment.size() < sizeof(SegmentHeader)) {
    return make_error(Errc::kProtocol, "segment is " + to_string(segment.size()) +
                                           " bytes, smaller than its " +
                                           to_string(sizeof(SegmentHeader)) + "-byte header");
  }
  const auto& header = *reinterpret_cast<const SegmentHeader*>(segment.data());
  // The magic and version say how to read the rest, so they come first.
  if (header.magic != kSegmentMagic) {
    return make_error(Errc::kProtocol, "segment magic " + hex(header.magic) +
                                           " is not a kvtier segment (expected " +
                                           hex(kSegmentMagic) + ")");
  }
  if (header.layout_version != kLayoutVersion) {
    return make_error(Errc::kVersionMismatch,
                      "segment layout version " + to_string(header.layout_version) +
                          ", this build has layout version " + to_string(kLayoutVersion));
  }
  // Acquire pairs with the creator's release: every field below was written before it.
  if (header.ready.load(std::memory_order_acquire) != 1) {
    return make_error(Errc::kBadState, "segment is not ready: its creator has not finished "
                                       "initialising it (ready = " +
                                           to_string(header.ready.load()) + ")");
  }
  if (header.header_size != sizeof(SegmentHeader)) {
    return make_error(Errc::kProtocol, "segment header size " + to_string(header.header_size) +
                                           ", expected " + to_string(sizeof(SegmentHeader)));
  }
  if (header.layout_fingerprint != kLayoutFingerprint) {
    return make_error(Errc::kVersionMismatch,
                      "segment layout fingerprint " + hex(header.layout_fingerprint) +
                          ", this build has " + hex(kLayoutFingerprint) +
                          " (same version, different struct layout: rebuild both sides)");
  }
  if (expected_kind && header.kind != *expected_kind) {
    return make_error(Errc::kProtocol, "segment kind " + kind_text(header.kind) + ", expected " +
                                           kind_text(*expected_kind));
  }
  if (header.segment_size != segment.size()) {
    return make_error(Errc::kProtocol,
                      "segment header says " + to_string(header.segment_size) +
                          " bytes but the object has " + to_string(segment.size()) +
                          " (truncated or resized)");
  }
  if (expected_epoch != 0 && header.daemon_epoch != expected_epoch) {
    return make_error(Errc::kBadState, "segment daemon epoch " + to_string(header.daemon_epoch) +
                                           ", expected " + to_string(expected_epoch) +
                                           " (stale segment of another daemon start)");
  }
  return {};
}

Result<Mapping> Mapping::map_segment(int fd, SegmentKind expected_kind,
                                     std::uint64_t expected_epoch) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) return os_error("fstat(segment fd)");
  if (info.st_size < static_cast<off_t>(sizeof(SegmentHeader))) {
    return make_error(Errc::kProtocol, "segment is " + std::to_string(info.st_size) +
                                           " bytes, smaller than its " +
                                           std::to_string(sizeof(SegmentHeader)) +
                                           "-byte header");
  }
  const auto size = static_cast<std::size_t>(info.st_size);
  void* address = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) return os_error("mmap(segment fd)");
  Mapping mapping(static_cast<std::byte*>(address), size);
  if (auto valid = validate_segment_header(mapping.bytes(), expected_kind, expected_epoch); !valid) {
    return tl::unexpected(std::move(valid.error()));
  }
  return mapping;
}

Mapping::Mapping(Mapping&& other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    unmap();
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

Mapping::~Mapping() { unmap(); }

void Mapping::unmap() noexcept {
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace kvtier::shm
