// NodeBudget in process: what the node DDR budget guarantees for every interleaving
// (node_budget.hpp, "What this guarantees"), pinned over members whose rows and T1 scores the
// test sets. The integration tests (tests/integration/pressure_test.cpp) check the observable
// part of the same guarantees through real processes, where the order of events is the machine's.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "node_budget.hpp"

namespace kvtier::daemon {
namespace {

constexpr std::uint64_t kRow = 1024;  // bytes per slot of every member here

// A client as the budget sees it: rows held, T1 tokens it could give (lowest first), and the
// relief it was asked for.
class Member final : public BudgetMember {
 public:
  Member(std::uint32_t id, std::uint32_t weight, std::uint32_t rows, std::vector<float> t1_scores = {})
      : id_(id), weight_(weight), rows_(rows), t1_(std::move(t1_scores)) {}

  std::uint32_t client_id() const noexcept override { return id_; }
  bool has_pool() const noexcept override { return true; }
  std::uint32_t weight() const noexcept override { return weight_; }
  std::uint64_t bytes_per_slot() const noexcept override { return kRow; }
  std::uint64_t ddr_bytes_used() const noexcept override { return std::uint64_t{rows_} * kRow; }
  bool relief_pending() const noexcept override { return !asked_.empty(); }
  void lowest_t1(std::size_t k, std::vector<ReliefCandidate>& out) const override {
    for (std::uint32_t i = 0; i < t1_.size() && i < k; ++i) out.push_back({t1_[i], id_, 1, i});
  }
  void request_relief(std::vector<ReliefCandidate> tokens) override {
    asked_.insert(asked_.end(), tokens.begin(), tokens.end());
  }

  void take(std::uint32_t rows) { rows_ += rows; }
  void give_back() {  // the relief plan was acknowledged
    rows_ -= static_cast<std::uint32_t>(asked_.size());
    t1_.erase(t1_.begin(), t1_.begin() + static_cast<std::ptrdiff_t>(asked_.size()));
    asked_.clear();
  }
  const std::vector<ReliefCandidate>& asked() const { return asked_; }

 private:
  std::uint32_t id_, weight_, rows_;
  std::vector<float> t1_;  // ascending
  std::vector<ReliefCandidate> asked_;
};

std::vector<float> ascending(std::size_t n, float first, float step = 1.0f) {
  std::vector<float> scores(n);
  for (std::size_t i = 0; i < n; ++i) scores[i] = first + step * static_cast<float>(i);
  return scores;
}

class NodeBudgetTest : public ::testing::Test {
 protected:
  NodeBudget& budget(std::uint64_t rows, const std::string& pressure = "demote-evict") {
    pools_.ddr_bytes_total = rows * kRow;
    pools_.pressure = pressure;
    budget_.emplace(pools_, [this](std::uint32_t id) { ++kicked_[id]; });
    return *budget_;
  }
  void join(std::initializer_list<Member*> members) {
    for (Member* m : members) budget_->join(*m);
  }

  config::PoolsSection pools_;
  std::optional<NodeBudget> budget_;
  std::map<std::uint32_t, int> kicked_;
};

TEST_F(NodeBudgetTest, SharesFollowTheWeightsOfTheMembers) {
  budget(240);
  Member a(1, 1, 0), b(2, 1, 0), c(3, 2, 0);
  join({&a, &b, &c});
  EXPECT_EQ(budget_->share_bytes(a), 60 * kRow);
  EXPECT_EQ(budget_->share_bytes(b), 60 * kRow);
  EXPECT_EQ(budget_->share_bytes(c), 120 * kRow);
  budget_->leave(3);  // shares are over the members present
  EXPECT_EQ(budget_->share_bytes(a), 120 * kRow);
}

TEST_F(NodeBudgetTest, ASharesArithmeticDoesNotOverflowForANodeOfAPetabyte) {
  pools_.ddr_bytes_total = std::uint64_t{1} << 50;
  budget_.emplace(pools_, [](std::uint32_t) {});
  Member a(1, 65535, 0), b(2, 1, 0);
  join({&a, &b});
  EXPECT_EQ(budget_->share_bytes(b), (std::uint64_t{1} << 50) / 65536);
}

TEST_F(NodeBudgetTest, AdmissionNeverGrantsMoreRowsThanTheNodeHasLeft) {
  budget(100);
  Member a(1, 1, 70), b(2, 1, 20);
  join({&a, &b});
  const Admission granted = budget_->admit(b, 25);
  EXPECT_EQ(granted.rows, 10u);
  EXPECT_EQ(granted.limited_by, shm::BackpressureReason::kNodeBudget);
  b.take(granted.rows);
  EXPECT_EQ(budget_->admit(a, 1).rows, 0u);
  EXPECT_EQ(budget_->admit(b, 1).rows, 0u);
}

TEST_F(NodeBudgetTest, WithRoomEveryRequestIsGrantedWhateverTheShares) {
  budget(100);
  Member a(1, 1, 0), b(2, 1, 0);
  join({&a, &b});
  const Admission granted = budget_->admit(a, 90);  // beyond its share of 50: free budget is usable
  EXPECT_EQ(granted.rows, 90u);
  EXPECT_EQ(granted.limited_by, shm::BackpressureReason::kNone);
}

TEST_F(NodeBudgetTest, ARefusalUnderTheShareAsksOverShareMembersForAtMostTheirExcessUpToTheRequestersShare) {
  budget(100);
  // Shares 25 each. A holds 45 (20 over), B 35 (10 over), C 20 (at share: not a victim), D 0.
  Member a(1, 1, 45, ascending(45, 0.5f)), b(2, 1, 35, ascending(35, 0.0f)), c(3, 1, 20, ascending(20, 0.0f));
  Member d(4, 1, 0);
  join({&a, &b, &c, &d});
  const Admission granted = budget_->admit(d, 40);
  EXPECT_EQ(granted.rows, 0u);
  // 40 rows missing, 25 of them within D's share: the lowest 25 scores of A's and B's excess
  // (B's 0..9 all go before A runs out of lower ones), B no more than its 10 above share.
  EXPECT_EQ(a.asked().size(), 15u);
  EXPECT_EQ(b.asked().size(), 10u);
  EXPECT_TRUE(c.asked().empty());
  EXPECT_EQ(kicked_[1], 1);
  EXPECT_EQ(kicked_[2], 1);
  EXPECT_EQ(kicked_.count(4), 0u);
}

TEST_F(NodeBudgetTest, ReliefTakesTheLowestScoresNodeWideUntilTheMissingRowsAreCovered) {
  budget(100);
  // A's T1 scores are 0, 2, 4, ...; B's 1, 3, 5, ...: the lowest 6 node-wide alternate.
  Member a(1, 1, 50, ascending(50, 0.0f, 2.0f)), b(2, 1, 50, ascending(50, 1.0f, 2.0f));
  Member c(3, 2, 0);  // shares: A 25, B 25, C 50
  join({&a, &b, &c});
  EXPECT_EQ(budget_->admit(c, 6).rows, 0u);
  ASSERT_EQ(a.asked().size(), 3u);
  ASSERT_EQ(b.asked().size(), 3u);
  for (const ReliefCandidate& t : a.asked()) EXPECT_LT(t.score, 6.0f);
  for (const ReliefCandidate& t : b.asked()) EXPECT_LT(t.score, 6.0f);
}

TEST_F(NodeBudgetTest, AMemberOverItsShareRelievesOnlyItselfOnItsOwnTurn) {
  budget(100);
  Member a(1, 1, 10, ascending(10, 0.0f)), b(2, 1, 90, ascending(90, 0.0f));
  join({&a, &b});
  EXPECT_EQ(budget_->admit(b, 5).rows, 0u);  // B holds 90 of its share 50
  EXPECT_EQ(b.asked().size(), 5u);
  EXPECT_TRUE(a.asked().empty());
  EXPECT_TRUE(kicked_.empty());  // B is inside its own turn: no kick
}

TEST_F(NodeBudgetTest, TheRowsWantedBeyondTheRequestersShareAreAskedOfItselfTheRestOfOthersOverTheirs) {
  budget(100);
  // Shares 50 each. A holds 40 and wants 30: 10 would fit its share (B holds 10 above its own),
  // the other 20 are beyond it.
  Member a(1, 1, 40, ascending(40, 0.0f)), b(2, 1, 60, ascending(60, 0.0f));
  join({&a, &b});
  EXPECT_EQ(budget_->admit(a, 30).rows, 0u);
  EXPECT_EQ(b.asked().size(), 10u);
  EXPECT_EQ(a.asked().size(), 20u);
  EXPECT_EQ(kicked_[2], 1);
  EXPECT_EQ(kicked_.count(1), 0u);
}

TEST_F(NodeBudgetTest, WhileAMemberUnderItsShareWaitsOthersGetNoRowsBeyondTheirShare) {
  budget(100);
  Member a(1, 1, 60, ascending(60, 0.0f)), b(2, 1, 30), c(3, 2, 0);  // shares 25, 25, 50
  join({&a, &b, &c});
  EXPECT_EQ(budget_->admit(c, 20).rows, 10u);  // 10 fit; C is under its share: it waits
  c.take(10);
  a.give_back();  // A's relief (its excess of 35, of which C needed 10) was acknowledged
  EXPECT_LT(a.ddr_bytes_used(), 60 * kRow);
  // The freed rows are for C: A and B, both over their share, get none of them.
  EXPECT_EQ(budget_->admit(a, 5).rows, 0u);
  EXPECT_EQ(budget_->admit(b, 5).rows, 0u);
  EXPECT_GT(budget_->admit(c, 10).rows, 0u);
}

TEST_F(NodeBudgetTest, AVictimWhoseReliefIsOutstandingIsNotAskedAgain) {
  budget(100);
  Member a(1, 1, 80, ascending(80, 0.0f)), b(2, 1, 20);
  join({&a, &b});
  EXPECT_EQ(budget_->admit(b, 10).rows, 0u);
  ASSERT_EQ(a.asked().size(), 10u);
  EXPECT_EQ(budget_->admit(b, 10).rows, 0u);
  EXPECT_EQ(a.asked().size(), 10u);  // not twice for the same rows
  EXPECT_EQ(kicked_[1], 1);
}

TEST_F(NodeBudgetTest, AVictimWithNothingItCouldGiveIsAskedForNothing) {
  budget(100);
  Member a(1, 1, 80), b(2, 1, 20);  // A lists no T1 token it could give (at its cap, no int8)
  join({&a, &b});
  EXPECT_EQ(budget_->admit(b, 10).rows, 0u);
  EXPECT_TRUE(a.asked().empty());
  EXPECT_TRUE(kicked_.empty());
}

TEST_F(NodeBudgetTest, UnderTheBackpressureRuleNobodyIsAskedAndTheRefusedRowsStayInHbm) {
  budget(100, "backpressure");
  Member a(1, 1, 80, ascending(80, 0.0f)), b(2, 1, 20);
  join({&a, &b});
  const Admission granted = budget_->admit(b, 10);
  EXPECT_EQ(granted.rows, 0u);
  EXPECT_EQ(granted.limited_by, shm::BackpressureReason::kNodeBudget);
  EXPECT_TRUE(a.asked().empty());
}

TEST_F(NodeBudgetTest, WithoutANodeBudgetEverythingIsGranted) {
  budget(0);
  Member a(1, 1, 1'000'000);
  join({&a});
  EXPECT_EQ(budget_->admit(a, 1'000'000).rows, 1'000'000u);
  EXPECT_EQ(budget_->share_bytes(a), 0u);
}

}  // namespace
}  // namespace kvtier::daemon
