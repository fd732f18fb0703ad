// ExportRegistry: the control plane's exported sequences, by hand-off token (handoff.hpp). An
// entry lives from ExportSequence until the hand-off is applied, the exporter closes the
// sequence before anyone adopted it, or the exporter is gone while no adoption is in flight.
//
// Tokens come from getrandom(): a client can adopt only a sequence whose token it was given.
// Thread-safety: control thread only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>

#include <capnp/message.h>

#include "kvtier/protocol/control.capnp.h"
#include "kvtier/base/unique_fd.hpp"

namespace kvtier::daemon {

class ExportRegistry {
 public:
  enum class State { kWaiting, kAdopting };

  struct Entry {
    std::uint32_t exporter = 0;  // client id
    std::uint32_t exporter_pid = 0;
    std::uint32_t exporter_uid = 0;  // only this user (or root) may adopt
    std::uint32_t sequence = 0;
    // The exporter's model geometry: an adopter's must be the same.
    std::uint32_t num_layers = 0, num_kv_heads = 0, head_dim = 0;
    wire::KvDtype dtype = wire::KvDtype::F16;
    std::shared_ptr<capnp::MallocMessageBuilder> cache;  // root: wire::ExportedCache
    std::shared_ptr<UniqueFd> fd;                        // fd kinds: the exporter's buffer
    State state = State::kWaiting;
    std::uint32_t adopter = 0;  // kAdopting: the adopting client
  };

  // Files an entry under a fresh token and returns the token.
  std::uint64_t add(Entry entry);
  // nullptr when the token is unknown.
  Entry* find(std::uint64_t token);
  // The token of an exporter's sequence, if it is exported.
  std::optional<std::uint64_t> token_of(std::uint32_t exporter, std::uint32_t sequence) const;
  // The client adopting an exporter's sequence right now, if any.
  std::optional<std::uint32_t> adopter_of(std::uint32_t exporter, std::uint32_t sequence) const;
  void erase(std::uint64_t token) { entries_.erase(token); }
  // The exporter's session ended: entries nobody is adopting go.
  void drop_waiting(std::uint32_t exporter);

 private:
  std::map<std::uint64_t, Entry> entries_;
};

}  // namespace kvtier::daemon
