// Predecessors: the pool segments earlier daemons under this shm prefix left in /dev/shm, held
// for their clients to reattach (PROTOCOL.md §4 "Reattachment"; DESIGN.md invariant 7).
//
// At start, scan() opens every "/kvtier.<prefix>-<epoch>.<id>.<kind>" of another epoch: control
// segments are removed at once (a reattached client gets a new one), pool and int8 pools whose
// header agrees with their name are kept as orphans, anything else is removed. adopt() hands an
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
#include <string>

#include <spdlog/logger.h>

#include "kvtier/shm/segment.hpp"

namespace kvtier::daemon {

class Predecessors {
 public:
  Predecessors(std::string shm_prefix, std::uint64_t own_epoch, spdlog::logger& log);

  // Scans /dev/shm (see above). Returns the number of orphans kept.
  std::size_t scan();
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
  std::chrono::steady_clock::time_point started_;
  std::map<std::string, shm::Segment> orphans_;
};

}  // namespace kvtier::daemon
