// Predecessors: the pool segments earlier daemons under this shm prefix left in /dev/shm, held
// for their clients to reattach (PROTOCOL.md §4 "Reattachment"; DESIGN.md invariant 7).
//
// At start, scan() opens every "/kvtier.<prefix>-<epoch>.<id>.<kind>" of another epoch: control
// segments are removed at once (a reattached client gets a new one), pool and int8 pools whose
// header agrees with their name are kept as orphans, anything else is removed. Under systemd the
// fd store hands back the pools' fds too (named as the segments, without the slash): one whose
// name is gone from /dev/shm is kept by its fd alone. adopt() hands an
// orphan to the session that proved it holds it; sweep() removes orphans whose owning process
// (SegmentHeader::owner_pid) has exited once the grace period since start has passed. Every
// removal and adoption is logged. Orphans still held at an orderly exit keep their names for the
// next daemon (keep_names()); otherwise a Predecessors unlinks what it holds when destroyed.
//
// Thread-safety: control thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/logger.h>

#include "kvtier/base/unique_fd.hpp"
#include "kvtier/shm/segment.hpp"

namespace kvtier::daemon {

class Predecessors {
 public:
  // `on_dropped(name)` runs for every stored fd or orphan let go of (removed, or not adoptable),
  // so its copy in systemd's fd store goes too.
  Predecessors(std::string shm_prefix, std::uint64_t own_epoch, spdlog::logger& log,
               std::function<void(const std::string&)> on_dropped = {});

  // Scans /dev/shm and `stored` (see above). Returns the number of orphans kept.
  std::size_t scan(std::vector<std::pair<std::string, UniqueFd>> stored = {});
  // The orphan named `name`, or nullptr.
  const shm::Segment* find(const std::string& name) const;
  // Takes the orphan named `name` (precondition: find() returned it).
  shm::Segment adopt(const std::string& name);
  // Removes orphans whose owner process is gone, once `grace` has passed since construction.
  void sweep(std::chrono::milliseconds grace);
  // An orderly exit: what is still held keeps its name.
  void keep_names();
  std::size_t size() const { return orphans_.size(); }

  // "/kvtier.<shm_prefix>-<epoch as 16 hex digits>.<client_id>.<kind>..." (shm::segment_name).
  static Result<std::string> name_of(const std::string& shm_prefix, std::uint64_t epoch, std::uint32_t client_id,
                                     shm::SegmentKind kind);

 private:
  std::string prefix_;
  std::uint64_t own_epoch_;
  spdlog::logger& log_;
  std::function<void(const std::string&)> on_dropped_;
  std::chrono::steady_clock::time_point started_;
  std::map<std::string, shm::Segment> orphans_;
};

}  // namespace kvtier::daemon
