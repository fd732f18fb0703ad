// Daemon death and restart (DESIGN.md invariant 7; PROTOCOL.md §4 "Reattachment"): real kvtierd
// processes killed, stopped or paused under real kvtier-workload clients, then a successor on the
// same runtime directory and shm prefix. Every assertion holds for any timing: the workloads
// pause at fixed steps (--pause-every) wherever a test needs the daemon's state to be known.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvtier/base/error.hpp"
#include "kvtier/protocol/version.hpp"
#include "kvtier/shm/layout.hpp"
#include "process.hpp"
#include "raw_peer.hpp"
#include "workload_run.hpp"

namespace kvtier::testing {
namespace {

using ::testing::HasSubstr;

std::string test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

const std::vector<std::string> kFastOrphans = {"--set", "limits.orphan_grace_ms=200"};

// Tiers in use from early on: a small window and Δ = 16 put tokens in T1 before step 64.
const std::vector<std::string> kTiering = {"--beta", "0.25", "--window", "16", "--interval", "16"};

ChildProcess spawn_workload(const DaemonUnderTest& daemon, const std::string& name, std::vector<std::string> extra) {
  std::vector<std::string> argv = {KVTIER_TEST_WORKLOAD, "--socket", daemon.socket().string(), "--name", name};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return ChildProcess::spawn(argv, daemon.dir() / (name + ".log"));
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

WorkloadRun finish(const DaemonUnderTest& daemon, ChildProcess& child, const std::string& name) {
  const auto code = child.wait(std::chrono::seconds(120));
  return workload_result(code.value_or(-1), read_log(daemon.dir() / (name + ".log")));
}

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// "key=<16 hex digits>" or "key=<decimal>" after the first `after` in `log`.
std::uint64_t logged_number(const std::string& log, const std::string& after, const std::string& key, int base) {
  const auto line = log.find(after);
  const auto at = log.find(key + "=", line == std::string::npos ? 0 : line);
  return at == std::string::npos ? 0 : std::stoull(log.substr(at + key.size() + 1), nullptr, base);
}

// Resumes paused clients once a reattachment attempt is certainly due: a paused client makes no
// attempt, and its next one is due at most the backoff's bound (1 s, PROTOCOL.md §4
// "Reattachment") after its last, so its first poll after this reattaches to a listening daemon.
// A precondition the test sets up, not a timing assertion.
void resume_for_reattach(std::initializer_list<ChildProcess*> clients) {
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  for (ChildProcess* client : clients) client->signal(SIGUSR1);
}

long ms_since(std::chrono::steady_clock::time_point t) {
  return static_cast<long>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t).count());
}

TEST(Restart, AfterDaemonSigkillEveryClientIsAdoptedExactAndNothingIsLeft) {
  DaemonUnderTest daemon(test_name(), kFastOrphans);
  const std::vector<std::string> run = with({"--steps", "192", "--pause-every", "64", "--hold"}, kTiering);
  ChildProcess exact = spawn_workload(daemon, "exact", with(run, {"--expect-exact"}));
  ChildProcess int8 = spawn_workload(daemon, "int8", with(run, {"--int8-pool-tokens", "512", "--int8-ratio", "0.4"}));
  ChildProcess idle = spawn_workload(daemon, "idle", {"--steps", "0", "--hold"});
  ASSERT_TRUE(wait_for_line(daemon.dir() / "exact.log", "paused step=64"));
  ASSERT_TRUE(wait_for_line(daemon.dir() / "int8.log", "paused step=64"));
  ASSERT_TRUE(wait_for_line(daemon.dir() / "idle.log", "holding name=idle"));
  const std::string json = daemon.ctl({"status", "--json"}).out;
  ASSERT_GT(sum_of(json, "t1"), 0) << json;  // host rows exist when the daemon dies

  daemon.process().signal(SIGKILL);
  ASSERT_EQ(daemon.process().wait(std::chrono::seconds(10)), 128 + SIGKILL);
  // Without a daemon the engines decode on: 64 steps on their last placement.
  exact.signal(SIGUSR1);
  int8.signal(SIGUSR1);
  ASSERT_TRUE(wait_for_line(daemon.dir() / "exact.log", "paused step=128"));
  ASSERT_TRUE(wait_for_line(daemon.dir() / "int8.log", "paused step=128"));

  daemon.start_successor(kFastOrphans);
  // Three DDR pools and one int8 pool wait; the control segments are gone.
  EXPECT_THAT(daemon.log(), HasSubstr("event=predecessor_pools orphans=4"));
  resume_for_reattach({&exact, &int8});
  ASSERT_TRUE(wait_for_line(daemon.dir() / "exact.log", "holding name=exact"));
  ASSERT_TRUE(wait_for_line(daemon.dir() / "int8.log", "holding name=int8"));
  // Both decoding clients reattached and the successor plans for them again.
  EXPECT_EQ(count_of(daemon.log(), "event=client_reattached"), 2u) << daemon.log();
  const std::string after = daemon.ctl({"status", "--json"}).out;
  EXPECT_GT(sum_of(after, "plans_sent"), 0) << after;

  for (ChildProcess* child : {&exact, &int8, &idle}) child->signal(SIGTERM);
  const WorkloadRun e = finish(daemon, exact, "exact"), q = finish(daemon, int8, "int8"), i = finish(daemon, idle, "idle");
  // Exit 0: outputs bit-identical to the full cache (exact) and a clean KV audit (both): no T1
  // or T2 row lost or changed across the outage.
  EXPECT_EQ(e.exit_code, 0) << e.out;
  EXPECT_EQ(q.exit_code, 0) << q.out;
  EXPECT_EQ(i.exit_code, 0) << i.out;
  EXPECT_EQ(e.number("reattachments"), 1) << e.out;
  EXPECT_EQ(q.number("reattachments"), 1) << q.out;
  EXPECT_EQ(e.number("lost_tokens"), 0);
  EXPECT_EQ(q.number("lost_tokens"), 0);
  EXPECT_GT(q.number("audit_t2_rows"), 0) << q.out;
  // The idle client never called in again: its pool waited, then went with its process.
  EXPECT_TRUE(eventually([&] { return daemon.segments().empty(); })) << ::testing::PrintToString(daemon.segments());
  EXPECT_THAT(daemon.log(), HasSubstr("event=orphan_removed"));
}

TEST(Restart, AfterSigtermTheSuccessorAdoptsTheRunningClients) {
  DaemonUnderTest daemon(test_name(), kFastOrphans);
  const std::vector<std::string> run =
      with({"--steps", "300", "--pause-every", "100", "--free-running", "--step-us", "1000"}, kTiering);
  ChildProcess a = spawn_workload(daemon, "a", with(run, {"--expect-exact"}));
  ChildProcess b = spawn_workload(daemon, "b", with(run, {"--int8-pool-tokens", "512", "--int8-ratio", "0.4"}));
  ASSERT_TRUE(wait_for_line(daemon.dir() / "a.log", "paused step=100"));
  ASSERT_TRUE(wait_for_line(daemon.dir() / "b.log", "paused step=100"));

  const auto sigterm = std::chrono::steady_clock::now();
  daemon.process().signal(SIGTERM);
  a.signal(SIGUSR1);
  b.signal(SIGUSR1);
  ASSERT_EQ(daemon.process().wait(std::chrono::seconds(30)), 0);
  EXPECT_THAT(daemon.log(), HasSubstr("event=drained"));
  const long down_ms = ms_since(sigterm);
  daemon.start_successor(kFastOrphans);
  // Until the successor's first plan. Both clients stop at step 200 whether they reattached by
  // then or not, and go on from there once an attempt is certainly due.
  const auto both_at_200 = [&] {
    return read_log(daemon.dir() / "a.log").find("paused step=200") != std::string::npos &&
           read_log(daemon.dir() / "b.log").find("paused step=200") != std::string::npos;
  };
  bool resumed = false;
  ASSERT_TRUE(eventually(
      [&] {
        if (!resumed && both_at_200()) {
          resume_for_reattach({&a, &b});  // the time printed below then includes its 1.1 s
          resumed = true;
        }
        return sum_of(daemon.ctl({"status", "--json"}).out, "plans_sent") > 0;
      },
      std::chrono::seconds(60)));
  std::printf("restart: SIGTERM -> old daemon gone %ld ms, -> successor's first plan %ld ms%s\n", down_ms,
              ms_since(sigterm), resumed ? " (clients held at step 200 for 1.1 s meanwhile)" : "");
  if (!resumed) {
    ASSERT_TRUE(eventually(both_at_200, std::chrono::seconds(120)));
    resume_for_reattach({&a, &b});
  }
  const WorkloadRun ra = finish(daemon, a, "a"), rb = finish(daemon, b, "b");
  EXPECT_EQ(ra.exit_code, 0) << ra.out;
  EXPECT_EQ(rb.exit_code, 0) << rb.out;
  EXPECT_EQ(ra.number("reattachments"), 1) << ra.out;
  EXPECT_EQ(rb.number("reattachments"), 1) << rb.out;
  EXPECT_TRUE(eventually([&] { return daemon.segments().empty(); })) << ::testing::PrintToString(daemon.segments());
}

TEST(Restart, TwoRestartsInARowTheClientReattachesToEachSuccessor) {
  DaemonUnderTest daemon(test_name(), kFastOrphans);
  ChildProcess client = spawn_workload(
      daemon, "client", with({"--steps", "192", "--pause-every", "64", "--int8-pool-tokens", "512", "--int8-ratio", "0.4"},
                             kTiering));
  for (const char* step : {"paused step=64", "paused step=128"}) {
    ASSERT_TRUE(wait_for_line(daemon.dir() / "client.log", step));
    daemon.process().signal(SIGKILL);
    ASSERT_TRUE(daemon.process().wait(std::chrono::seconds(10)).has_value());
    // The pools keep their first daemon's names: every successor finds them under those.
    daemon.start_successor(kFastOrphans);
    EXPECT_THAT(daemon.log(), HasSubstr("event=predecessor_pools orphans=2"));
    resume_for_reattach({&client});
  }
  const WorkloadRun run = finish(daemon, client, "client");
  EXPECT_EQ(run.exit_code, 0) << run.out;  // KV audit clean across both outages
  EXPECT_EQ(run.number("reattachments"), 2) << run.out;
  EXPECT_EQ(run.number("daemon_losses"), 2) << run.out;
  EXPECT_TRUE(eventually([&] { return daemon.segments().empty(); })) << ::testing::PrintToString(daemon.segments());
}

TEST(Restart, SigstopOfTheDaemonLeavesClientsDecodingAndCountsDroppedScores) {
  DaemonUnderTest daemon(test_name(), {"--set", "limits.score_ring_records=16"});
  ChildProcess client =
      spawn_workload(daemon, "client", with({"--steps", "96", "--pause-every", "32", "--free-running"}, kTiering));
  ASSERT_TRUE(wait_for_line(daemon.dir() / "client.log", "paused step=32"));
  daemon.process().signal(SIGSTOP);
  client.signal(SIGUSR1);
  // 32 steps with nobody reading a 16-record score ring.
  const bool decoded = wait_for_line(daemon.dir() / "client.log", "paused step=64");
  daemon.process().signal(SIGCONT);
  ASSERT_TRUE(decoded);
  client.signal(SIGUSR1);
  const WorkloadRun run = finish(daemon, client, "client");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_GT(run.number("dropped"), 0) << run.out;
  EXPECT_EQ(run.number("daemon_losses"), 0) << run.out;
}

// A Reattach built by hand, claiming the pool of the client "owner".
void send_claim(RawPeer& peer, std::uint64_t epoch, std::uint32_t client_id, std::span<const int> fds) {
  peer.send_hello(protocol::kProtocolMajor, protocol::kProtocolMinor, shm::kLayoutVersion, shm::kLayoutFingerprint);
  ASSERT_TRUE(peer.receive().has_value());  // Welcome
  capnp::MallocMessageBuilder message;
  auto claim = message.initRoot<wire::ClientMessage>().initReattach();
  claim.setPreviousEpoch(epoch);
  claim.setPreviousClientId(client_id);
  auto model = claim.initModel();
  model.setNumLayers(4);
  model.setNumKvHeads(2);
  model.setHeadDim(16);
  model.setDtype(wire::KvDtype::F32);
  model.setPoolTokens(3 * (48 + 128));
  peer.send(message, fds);
}

// The refusal the daemon sent, as "<code>: <message>"; empty when it sent none.
std::string refusal(RawPeer& peer) {
  auto reply = peer.receive();
  if (!reply) return {};
  auto root = reply->root<wire::DaemonMessage>();
  if (root.which() != wire::DaemonMessage::ERROR) return "not an error";
  return std::string(errc_name(static_cast<Errc>(root.getError().getCode()))) + ": " +
         root.getError().getMessage().cStr();
}

TEST(Restart, AReattachClaimingAnotherClientsPoolIsRefusedAndTheOwnerKeepsIt) {
  DaemonUnderTest daemon(test_name(), kFastOrphans);
  ChildProcess owner = spawn_workload(
      daemon, "owner", with({"--steps", "128", "--pause-every", "64", "--expect-exact"}, kTiering));
  ASSERT_TRUE(wait_for_line(daemon.dir() / "owner.log", "paused step=64"));
  const std::string log = daemon.log();
  const std::uint64_t epoch = logged_number(log, "event=ready", "epoch", 16);
  const auto client_id = static_cast<std::uint32_t>(logged_number(log, "name=owner", "client_id", 10));
  ASSERT_NE(epoch, 0u);
  daemon.process().signal(SIGKILL);
  ASSERT_TRUE(daemon.process().wait(std::chrono::seconds(10)).has_value());
  daemon.start_successor(kFastOrphans);
  {
    // Its own memory, named as the owner's pool: not that segment.
    const int forged = ::memfd_create("forged-pool", MFD_CLOEXEC);
    ASSERT_GE(forged, 0);
    ASSERT_EQ(::ftruncate(forged, 1 << 20), 0);
    RawPeer peer(daemon.socket());
    send_claim(peer, epoch, client_id, std::span<const int>(&forged, 1));
    EXPECT_THAT(refusal(peer), HasSubstr("is not that segment"));
    EXPECT_TRUE(peer.closed_by_daemon());
    ::close(forged);
  }
  {
    RawPeer peer(daemon.socket());
    send_claim(peer, epoch, client_id, {});
    EXPECT_THAT(refusal(peer), HasSubstr("carries 0 fds"));
  }
  {
    const int forged = ::memfd_create("forged-pool", MFD_CLOEXEC);
    RawPeer peer(daemon.socket());
    send_claim(peer, epoch, client_id + 100, std::span<const int>(&forged, 1));
    EXPECT_THAT(refusal(peer), HasSubstr("waits for its client"));
    ::close(forged);
  }
  {
    RawPeer peer(daemon.socket());
    send_claim(peer, logged_number(daemon.log(), "event=ready", "epoch", 16), client_id, {});
    EXPECT_THAT(refusal(peer), HasSubstr("is this daemon's own"));
  }
  // Nothing of the owner's changed: it reattaches and finishes exact.
  resume_for_reattach({&owner});
  const WorkloadRun run = finish(daemon, owner, "owner");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_EQ(run.number("reattachments"), 1) << run.out;
  // Its pool went with it (the raw peers' control segments wait for this test process to exit).
  EXPECT_TRUE(eventually([&] {
    const auto names = daemon.segments();
    return std::none_of(names.begin(), names.end(), [](const std::string& n) { return n.find(".pool") != n.npos; });
  })) << ::testing::PrintToString(daemon.segments());
}

}  // namespace
}  // namespace kvtier::testing
