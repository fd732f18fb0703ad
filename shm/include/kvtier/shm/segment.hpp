// Segment: the daemon's owner of one named POSIX shared-memory object and its mapping.
//
// Created with mode 0600 (owner = the service user) through Boost.Interprocess, sized to whole
// pages, header written with `ready` last. The daemon hands fd() to exactly one client over
// SCM_RIGHTS. The name stays until this object is destroyed (or forever after release_name()),
// so a restarted daemon can open_existing() and adopt the segments of live clients; clients keep
// their own mappings whatever the daemon does. Header facts are copied into the object at
// create/open and never re-read: the client can write to the whole segment.
// Thread-safety: a move-only value; one owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/base/error.hpp"
#include "kvtier/base/unique_fd.hpp"
#include "kvtier/shm/layout.hpp"

namespace kvtier::shm {

// "/kvtier.<prefix>.<client_id>.control" or "/kvtier.<prefix>.<client_id>.pool.<index>".
// prefix: 1..64 characters of [A-Za-z0-9_-]; kInvalidArgument otherwise.
Result<std::string> segment_name(std::string_view prefix, std::uint32_t client_id,
                                 SegmentKind kind, std::uint32_t index = 0);

// The client process a segment is made for, recorded in its header (owner_uid, owner_pid): a
// restarted daemon adopts a segment only for a peer of that uid and removes it once that pid is
// gone. The default names no process.
struct SegmentOwner {
  std::uint32_t uid = kNoOwnerUid;
  std::uint32_t pid = 0;
};

class Segment {
 public:
  // Fills the payload before `ready` is published. Receives payload() (zero-filled).
  using PayloadInit = std::function<void(std::span<std::byte> payload)>;

  // Creates `name` exclusively (kOsError naming errno if it exists or cannot be created),
  // sizes it to sizeof(SegmentHeader) + payload_bytes rounded up to the page size, writes the
  // header, runs `init`, then stores ready = 1 (release). kInvalidArgument for a bad name.
  static Result<Segment> create(std::string name, SegmentKind kind, std::size_t payload_bytes,
                                std::uint64_t epoch, std::uint32_t client_id,
                                const PayloadInit& init = {}, SegmentOwner owner = {});

  // Opens an existing segment (adoption after a daemon restart) and validates its header (any
  // kind, any epoch: check kind() and epoch() yourself). The returned Segment owns the name.
  static Result<Segment> open_existing(std::string name);
  // The same for a segment known by an fd only (systemd's fd store hands a restarted daemon the
  // fds its predecessor stored; the name may be gone). `name` is what the segment was called;
  // the returned Segment owns no name (it unlinks nothing) and closes `fd` when destroyed.
  static Result<Segment> from_fd(UniqueFd fd, std::string name);

  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  // Unmaps, closes, and unlinks the name unless release_name() was called.
  ~Segment();

  int fd() const noexcept;  // owned by the Segment; dup it to keep it longer
  std::byte* base() const noexcept;
  std::size_t size() const noexcept;
  std::span<std::byte> bytes() const noexcept { return {base(), size()}; }
  std::span<std::byte> payload() const noexcept {
    return bytes().subspan(sizeof(SegmentHeader));
  }
  const std::string& name() const noexcept;
  SegmentKind kind() const noexcept;
  std::uint64_t epoch() const noexcept;
  std::uint32_t client_id() const noexcept;
  SegmentOwner owner() const noexcept;

  // Keep the name after destruction (e.g. a daemon handing over to its successor).
  void release_name() noexcept;

 private:
  struct Impl;
  explicit Segment(std::unique_ptr<Impl> impl) noexcept;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::shm
