// The daemon's side of reattachment in process (daemon/src): a Reattach's sequences checked and
// rebuilt (restore_sequences), and the predecessors' segments found, kept, adopted and swept
// (Predecessors) in the real /dev/shm under a prefix of this test's own.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <capnp/message.h>
#include <gtest/gtest.h>
#include <spdlog/logger.h>

#include "kvtier/config/config.hpp"
#include "kvtier/shm/control_layout.hpp"
#include "kvtier/shm/control_segment.hpp"
#include "kvtier/shm/pool_segment.hpp"
#include "predecessors.hpp"
#include "reattach_checks.hpp"
#include "request_checks.hpp"

namespace kvtier::daemon {
namespace {

// ---- restore_sequences ----------------------------------------------------------------------

struct Claim {
  capnp::MallocMessageBuilder message;
  wire::Reattach::Builder root = message.initRoot<wire::Reattach>();
  config::DaemonConfig config;

  Claim() {
    auto model = root.initModel();
    model.setNumLayers(2);
    model.setNumKvHeads(1);
    model.setHeadDim(8);
    model.setDtype(wire::KvDtype::F32);
    model.setPoolTokens(64);
    model.setInt8PoolTokens(64);
    config.tiering.window_tokens = 16;
    config.tiering.sink_tokens = 4;
  }
  PoolRequest pools() { return pool_request_from_wire(root.getModel().asReader(), config.pools).value(); }
  // A sequence of `length` tokens, prompt 8, the int8 tier on; lists set by the caller.
  wire::ReattachedSequence::Builder sequence(unsigned i, std::uint32_t id, std::uint32_t length = 100) {
    auto s = root.getSequences()[i];
    s.setSequenceId(id);
    s.setPromptLength(8);
    s.setLength(length);
    auto t = s.initTiering();
    t.setUseDefaults(false);
    t.setSinkTokens(4);
    t.setWindowTokens(16);
    t.setInterval(8);
    t.setHbmRatio(0.25);
    t.setDecay(1.0);
    t.setInt8Ratio(0.3);
    return s;
  }
  Result<std::vector<RestoredSequence>> check() { return restore_sequences(root.asReader(), pools(), config, 1); }
};

void set(capnp::List<std::uint32_t>::Builder list, std::vector<std::uint32_t> values) {
  for (unsigned i = 0; i < values.size(); ++i) list.set(i, values[i]);
}

TEST(ReattachChecks, SequencesAreRebuiltWithTheirSlots) {
  Claim claim;
  claim.root.initSequences(2);
  auto a = claim.sequence(0, 1);
  set(a.initT1Positions(2), {12, 20});
  set(a.initT1Slots(2), {7, 3});
  set(a.initT2Positions(1), {30});
  set(a.initT2Slots(1), {33});
  set(a.initT3Positions(1), {13});
  auto b = claim.sequence(1, 4);
  set(b.initT1Positions(1), {12});
  set(b.initT1Slots(1), {8});
  auto restored = claim.check();
  ASSERT_TRUE(restored.has_value()) << restored.error().message;
  ASSERT_EQ(restored->size(), 2u);
  const RestoredSequence& s = (*restored)[0];
  EXPECT_EQ(s.sequence_id, 1u);
  EXPECT_EQ(s.t1.slot_of(20), 3u);
  EXPECT_EQ(s.t2.slot_of(30), 33u);
  EXPECT_EQ(s.tiers.tier_of(13), tier::Tier::kT3);
  EXPECT_EQ(s.tiers.count(tier::Tier::kT0), 96u);
  EXPECT_EQ(s.rows(), 3u);
  EXPECT_EQ((*restored)[1].t1.slot_of(12), 8u);
}

TEST(ReattachChecks, ARecordNoPoolCouldHoldIsRefusedNamingTheSequence) {
  const auto refused = [](auto fill) {
    Claim claim;
    claim.root.initSequences(2);
    fill(claim);
    auto restored = claim.check();
    EXPECT_FALSE(restored.has_value());
    return restored ? std::string() : restored.error().message;
  };
  // One slot held by two sequences.
  EXPECT_NE(refused([](Claim& c) {
              auto a = c.sequence(0, 1);
              set(a.initT1Positions(1), {12});
              set(a.initT1Slots(1), {5});
              auto b = c.sequence(1, 2);
              set(b.initT1Positions(1), {12});
              set(b.initT1Slots(1), {5});
            }).find("held twice"),
            std::string::npos);
  EXPECT_NE(refused([](Claim& c) {
              auto a = c.sequence(0, 1);
              set(a.initT1Positions(1), {12});
              set(a.initT1Slots(1), {64});
              c.sequence(1, 2);
            }).find("beyond the pool"),
            std::string::npos);
  EXPECT_NE(refused([](Claim& c) {
              auto a = c.sequence(0, 1);
              set(a.initT1Positions(2), {12, 13});
              set(a.initT1Slots(1), {1});
              c.sequence(1, 2);
            }).find("2 positions and 1 slots"),
            std::string::npos);
  EXPECT_NE(refused([](Claim& c) {
              c.sequence(0, 3);
              c.sequence(1, 3);
            }).find("twice"),
            std::string::npos);
  EXPECT_NE(refused([](Claim& c) {
              c.sequence(0, 1);
              auto b = c.sequence(1, 2);
              set(b.initT3Positions(1), {95});  // in the window
            }).find("Reattach sequence 2: restored position 95"),
            std::string::npos);
  // A position far beyond the sequence is refused before any map grows to it (the fuzzer's
  // 3.4 GB allocation, tests/fuzz/corpus/frame_dispatch/regress-reattach-position-beyond-length).
  EXPECT_NE(refused([](Claim& c) {
              auto a = c.sequence(0, 1);
              set(a.initT1Positions(1), {0xfffffff0u});
              set(a.initT1Slots(1), {1});
              c.sequence(1, 2);
            }).find("beyond the sequence's 100 tokens"),
            std::string::npos);
  EXPECT_NE(refused([](Claim& c) {
              c.sequence(0, 1, 0xffffffffu);
              c.sequence(1, 2);
            }).find("limits.max_tokens_per_sequence"),
            std::string::npos);
  Claim many;
  many.config.limits.max_sequences_per_client = 1;
  many.root.initSequences(2);
  many.sequence(0, 1);
  many.sequence(1, 2);
  EXPECT_EQ(many.check().error().code, Errc::kLimitExceeded);
}

// ---- Predecessors ---------------------------------------------------------------------------

class PredecessorsTest : public ::testing::Test {
 protected:
  std::string prefix_ = "kvtu-" + std::to_string(::getpid());
  spdlog::logger log_{"reattach_test"};
  static constexpr std::uint64_t kOld = 0x1111222233334444ull, kNew = 0x5555666677778888ull;

  ~PredecessorsTest() override {
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("kvtier." + prefix_ + "-", 0) == 0) ::shm_unlink(("/" + name).c_str());
    }
  }
  bool exists(const std::string& name) const { return std::filesystem::exists("/dev/shm" + name); }
  // A pool of client `id` of the old epoch, owned by `pid`, left behind (name kept).
  std::string leave_pool(std::uint32_t id, std::uint32_t pid, std::uint32_t named_id = 0) {
    const std::string name =
        Predecessors::name_of(prefix_, kOld, named_id != 0 ? named_id : id, shm::SegmentKind::kPool).value();
    auto geometry = shm::make_pool_geometry(1, 1, 8, 4, 16).value();
    auto segment = shm::create_pool_segment(name, geometry, kOld, id, shm::SegmentOwner{::getuid(), pid});
    EXPECT_TRUE(segment.has_value());
    segment->release_name();
    return name;
  }
  // A pid that no longer exists: a child that has exited and been reaped.
  static std::uint32_t gone_pid() {
    const pid_t child = ::fork();
    if (child == 0) ::_exit(0);
    ::waitpid(child, nullptr, 0);
    return static_cast<std::uint32_t>(child);
  }
};

TEST_F(PredecessorsTest, ScanKeepsPoolsRemovesControlAndMisnamedSegments) {
  const std::string kept = leave_pool(1, static_cast<std::uint32_t>(::getpid()));
  const std::string misnamed = leave_pool(2, static_cast<std::uint32_t>(::getpid()), 3);
  const std::string control = Predecessors::name_of(prefix_, kOld, 1, shm::SegmentKind::kControl).value();
  {
    auto layout = shm::ControlLayout::make(16, 16).value();
    auto segment = shm::create_control_segment(control, layout, kOld, 1);
    ASSERT_TRUE(segment.has_value());
    segment->release_name();
  }
  // The scanning daemon's own segments are not its predecessors'.
  const std::string own = Predecessors::name_of(prefix_, kNew, 1, shm::SegmentKind::kPool).value();
  auto own_segment = shm::create_pool_segment(own, shm::make_pool_geometry(1, 1, 8, 4, 16).value(), kNew, 1);
  ASSERT_TRUE(own_segment.has_value());
  Predecessors predecessors(prefix_, kNew, log_);
  EXPECT_EQ(predecessors.scan(), 1u);
  EXPECT_NE(predecessors.find(kept), nullptr);
  EXPECT_EQ(predecessors.find(own), nullptr);
  EXPECT_TRUE(exists(own));
  EXPECT_FALSE(exists(misnamed));
  EXPECT_FALSE(exists(control));
  shm::Segment adopted = predecessors.adopt(kept);
  EXPECT_EQ(adopted.client_id(), 1u);
  EXPECT_EQ(adopted.owner().pid, static_cast<std::uint32_t>(::getpid()));
  EXPECT_EQ(predecessors.find(kept), nullptr);
  EXPECT_TRUE(exists(kept));  // the adopter owns the name now
}

TEST_F(PredecessorsTest, SweepRemovesOnlyPoolsWhoseProcessIsGoneAndOnlyAfterTheGrace) {
  const std::string alive = leave_pool(1, static_cast<std::uint32_t>(::getpid()));
  const std::string orphan = leave_pool(2, gone_pid());
  Predecessors predecessors(prefix_, kNew, log_);
  ASSERT_EQ(predecessors.scan(), 2u);
  predecessors.sweep(std::chrono::hours(1));  // within the grace: nothing goes
  EXPECT_TRUE(exists(orphan));
  predecessors.sweep(std::chrono::milliseconds(0));
  EXPECT_FALSE(exists(orphan));
  EXPECT_TRUE(exists(alive));
  EXPECT_EQ(predecessors.size(), 1u);
}

TEST_F(PredecessorsTest, AnOrderlyExitKeepsTheNamesOfWhatIsStillHeld) {
  const std::string pool = leave_pool(1, static_cast<std::uint32_t>(::getpid()));
  {
    Predecessors predecessors(prefix_, kNew, log_);
    ASSERT_EQ(predecessors.scan(), 1u);
    predecessors.keep_names();
  }
  EXPECT_TRUE(exists(pool));
  {
    Predecessors predecessors(prefix_, kNew, log_);
    ASSERT_EQ(predecessors.scan(), 1u);
  }
  EXPECT_FALSE(exists(pool));  // not kept: gone with the Predecessors that held it
}

}  // namespace
}  // namespace kvtier::daemon
