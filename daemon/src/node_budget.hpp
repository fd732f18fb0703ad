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
//   victims   for the missing rows that would still fit in the requester's share: the other
//             clients over their share; for those beyond its share: the requester itself (a
//             client at or over its share takes nothing from others)
//   tokens    the lowest cumulative scores node-wide among the victims' T1 tokens, no other
//             client giving back more than it holds above its share, until the missing bytes are
//             covered
//   action    each victim moves those tokens T1 -> T2 (int8) when it has an int8 pool and the
//             rule allows demotion, else T1 -> T3 within each sequence's eviction headroom when
//             the rule allows eviction; the rest stay (pure backpressure). The victim executes
//             this as an ordinary two-phase plan on its own turn; its rows free on the ack.
// A victim with relief already queued or in flight is not asked again. The requester's own relief
// runs on its next free turn (after the plan it was refused in); other victims are kicked.
//
// What this guarantees, for every interleaving of the clients (node_budget_test.cpp pins each;
// tests/integration/pressure_test.cpp checks the observable ones through real processes):
//   1. The rows in use over all clients, unacknowledged destinations included, never exceed
//      ddr_bytes_total: admit() grants only rows that fit.
//   2. Every refusal of a client under its share asks each client over its share that could give
//      (a pool, no relief outstanding) for up to what it holds above its share, taking the lowest
//      cumulative scores node-wide first; until the refused client is served (or stops asking),
//      clients over their share get no rows beyond their share.
//   3. A client takes nothing from others beyond its share: the refused rows beyond its share
//      are asked of itself (its own lowest T1 tokens in its other sequences), so a client alone
//      on the node demotes or evicts by its own policy rather than backpressuring forever.
//   4. Relief is a policy decision of the victim's own (demotion, or eviction within its cap):
//      a victim that can do neither gives nothing, and the refused tokens stay in T0.
// What it does not guarantee: how the rows end up split at any moment. That depends on which
// client asked when, on what each victim can give under its own policy (a client at its
// eviction cap with no int8 pool keeps its rows above its share) and on how soon each victim
// runs its relief plan.
//
// Members: each ClientChannel joins on construction and leaves on destruction; tests join their
// own members. Thread-safety: data-plane thread only (like the channels it reads).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "kvtier/config/config.hpp"
#include "kvtier/shm/records.hpp"

namespace kvtier::daemon {

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

// What the budget needs of a client (ClientChannel implements it).
class BudgetMember {
 public:
  virtual std::uint32_t client_id() const noexcept = 0;
  virtual bool has_pool() const noexcept = 0;
  virtual std::uint32_t weight() const noexcept = 0;
  // One slot holds a token's row in every layer.
  virtual std::uint64_t bytes_per_slot() const noexcept = 0;
  // T1 rows held, an unacknowledged plan's destinations included.
  virtual std::uint64_t ddr_bytes_used() const noexcept = 0;
  // Relief asked for and not yet resolved (queued or in a plan in flight).
  virtual bool relief_pending() const noexcept = 0;
  // Appends up to k of the client's lowest-score T1 tokens that it could give under the rule
  // (per sequence; the budget orders them node-wide).
  virtual void lowest_t1(std::size_t k, std::vector<ReliefCandidate>& out) const = 0;
  // Queues relief, acted on by the member's next free turn.
  virtual void request_relief(std::vector<ReliefCandidate> tokens) = 0;

 protected:
  ~BudgetMember() = default;
};

struct Admission {
  std::uint32_t rows = 0;  // new T1 rows the client may take now
  shm::BackpressureReason limited_by = shm::BackpressureReason::kNone;
};

class NodeBudget {
 public:
  // `kick(client_id)` makes that client's channel look at its queued relief soon (not inline).
  NodeBudget(const config::PoolsSection& pools, std::function<void(std::uint32_t)> kick);

  // Precondition: client ids are unique among members; a member leaves before it is destroyed.
  void join(BudgetMember& member);
  void leave(std::uint32_t client_id);

  // How many of `wanted` new T1 rows `client` (a member) may take now.
  Admission admit(const BudgetMember& client, std::uint32_t wanted);
  // The client's weighted share of the node budget in bytes; 0 when there is no node budget.
  std::uint64_t share_bytes(const BudgetMember& client) const;
  // pools.pressure, parsed once.
  const PressureRule& rule() const noexcept { return rule_; }

 private:
  // `weights`: total_weight(), computed once per admission.
  void relieve(const BudgetMember& requester, std::uint64_t missing_bytes, std::uint64_t weights);
  std::uint64_t total_weight() const;
  std::uint64_t share_of(const BudgetMember& client, std::uint64_t weights) const;

  const config::PoolsSection& pools_;
  PressureRule rule_;
  std::map<std::uint32_t, BudgetMember*> members_;
  std::function<void(std::uint32_t)> kick_;
  // Clients under their share refused rows, not yet served: id -> admissions_ when last refused.
  std::map<std::uint32_t, std::uint64_t> waiting_;
  std::uint64_t admissions_ = 0;
};

}  // namespace kvtier::daemon
