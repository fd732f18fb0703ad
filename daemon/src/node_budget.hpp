// NodeBudget: the node-wide DDR (T1) budget shared by every engine client, and the pressure
// cascade that runs when it is spent (DESIGN.md §4.1: pressure causes a policy decision, never a
// dropped write).
//
// Accounting: a client uses slots_used x bytes_per_slot of pools.ddr_bytes_total, where
// slots_used counts committed rows and the destinations of its unacknowledged plan. Each client
// has a weighted share, share = total x weight / (sum of the weights of clients with a pool).
// Shares only matter under pressure: a client may use free budget beyond its share.
//
// admit(client, wanted) grants min(wanted, rows that still fit); while a client under its share
// is waiting for rows (refused recently — within the last 8 admissions per client — and neither
// fully granted since nor at its share yet), a client over its share gets nothing beyond its
// share, so the rows given back reach the one waiting instead of the next over-share asker. A
// waiting client that stops asking stops counting after those admissions. When the grant is
// fewer than wanted
// (the requesting tokens then stay in T0: backpressure, counted and told to the client), it asks
// for relief, per pools.pressure:
//   victims   the clients over their share (other than the requester); if the requester is
//             itself over its share, only the requester (it takes nothing from others)
//   tokens    the lowest cumulative scores node-wide among the victims' T1 tokens, no victim
//             giving back more than it holds above its share, until the missing bytes are covered
//   action    each victim moves those tokens T1 -> T2 (int8) when it has an int8 pool and the
//             rule allows demotion, else T1 -> T3 within each sequence's eviction headroom when
//             the rule allows eviction; the rest stay (pure backpressure). The victim executes
//             this as an ordinary two-phase plan on its own turn; its rows free on the ack.
// A victim with relief already queued or in flight is not asked again.
//
// Thread-safety: data-plane thread only (like the channels it reads).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "kvtier/config/config.hpp"
#include "kvtier/shm/records.hpp"

namespace kvtier::daemon {

class ClientChannel;
using Channels = std::map<std::uint32_t, std::unique_ptr<ClientChannel>>;

// A T1 token a victim could give back.
struct ReliefCandidate {
  float score = 0;
  std::uint32_t client_id = 0;
  std::uint32_t sequence = 0;
  std::uint32_t position = 0;
};

// What pools.pressure allows a victim to do.
struct PressureRule {
  bool demote = false;  // T1 -> T2, in sequences that use T2
  bool evict = false;   // T1 -> T3, within each sequence's eviction headroom
};

struct Admission {
  std::uint32_t rows = 0;  // new T1 rows the client may take now
  shm::BackpressureReason limited_by = shm::BackpressureReason::kNone;
};

class NodeBudget {
 public:
  // `kick(client_id)` makes that client's channel look at its queued relief soon (not inline).
  NodeBudget(const config::PoolsSection& pools, const Channels& channels, std::function<void(std::uint32_t)> kick);

  Admission admit(const ClientChannel& client, std::uint32_t wanted);
  // The client's weighted share of the node budget in bytes; 0 when there is no node budget.
  std::uint64_t share_bytes(const ClientChannel& client) const;
  // pools.pressure, parsed once.
  const PressureRule& rule() const noexcept { return rule_; }

 private:
  // `weights`: total_weight(), computed once per admission.
  void relieve(const ClientChannel& requester, std::uint64_t missing_bytes, std::uint64_t weights);
  std::uint64_t total_weight() const;
  std::uint64_t share_of(const ClientChannel& client, std::uint64_t weights) const;

  const config::PoolsSection& pools_;
  PressureRule rule_;
  const Channels& channels_;
  std::function<void(std::uint32_t)> kick_;
  // Clients under their share refused rows, not yet served: id -> admissions_ when last refused.
  std::map<std::uint32_t, std::uint64_t> waiting_;
  std::uint64_t admissions_ = 0;
};

}  // namespace kvtier::daemon
