// Sequence hand-off through real processes: kvtier-handoff-peer --role export tiers a sequence
// (some tokens to T1, T2 or T3) against the real kvtierd, exports it and writes the token; a
// second peer process adopts it, executes the hand-off plan (the T0 rows copied out of the
// exporter's cache, mapped from the fd or CUDA IPC handle kvtierd passed on; the T1 rows and T2
// blocks copied by kvtierd into the adopter's pools) and checks every row against the values the
// exporter wrote, then keeps decoding on the adopted sequence. Runs once per backend; the cuda
// instances skip with the peer's "no CUDA device: ..." where there is none.
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <fstream>
#include <tuple>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "workload_run.hpp"

namespace kvtier::testing {
namespace {

using ::testing::HasSubstr;

#define KVTIER_TEST_HANDOFF_PEER ::kvtier::testing::test_binary(KVTIER_TEST_HANDOFF_PEER_PATH)

std::string test_name() {
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

std::string peer_unavailable(const std::string& backend) {
  return backend_unavailable(backend, KVTIER_TEST_HANDOFF_PEER);
}

WorkloadRun finished(ChildProcess& child, const std::filesystem::path& log) {
  WorkloadRun run;
  run.exit_code = child.wait(std::chrono::seconds(120)).value_or(-1);
  std::ifstream in(log);
  run.out.assign(std::istreambuf_iterator<char>(in), {});
  const auto at = run.out.find("summary ");
  if (at == std::string::npos) return run;
  std::istringstream line(run.out.substr(at + 8, run.out.find('\n', at) - at - 8));
  for (std::string item; line >> item;) {
    if (const auto eq = item.find('='); eq != std::string::npos) run.summary[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return run;
}

struct Pair {
  WorkloadRun exporter, adopter;
};

// Runs an exporter and an adopter against `daemon`; `exporter_args` shape the exported sequence.
Pair hand_off(const DaemonUnderTest& daemon, const std::string& backend, std::vector<std::string> exporter_args,
              std::vector<std::string> adopter_args = {}) {
  const auto token = daemon.dir() / "token", done = daemon.dir() / "done";
  const std::vector<std::string> common = {"--socket", daemon.socket().string(), "--backend", backend,
                                           "--token-file", token.string(), "--done-file", done.string()};
  std::vector<std::string> exporter = {KVTIER_TEST_HANDOFF_PEER, "--role", "export"};
  exporter.insert(exporter.end(), common.begin(), common.end());
  exporter.insert(exporter.end(), exporter_args.begin(), exporter_args.end());
  std::vector<std::string> adopter = {KVTIER_TEST_HANDOFF_PEER, "--role", "adopt", "--steps", "48"};
  adopter.insert(adopter.end(), common.begin(), common.end());
  adopter.insert(adopter.end(), adopter_args.begin(), adopter_args.end());
  ChildProcess a = ChildProcess::spawn(exporter, daemon.dir() / "exporter.log");
  ChildProcess b = ChildProcess::spawn(adopter, daemon.dir() / "adopter.log");
  Pair out;
  out.adopter = finished(b, daemon.dir() / "adopter.log");
  out.exporter = finished(a, daemon.dir() / "exporter.log");
  return out;
}

using Case = std::tuple<std::string, std::string>;  // backend, what the exported sequence holds

class HandsOff : public ::testing::TestWithParam<Case> {};

TEST_P(HandsOff, EveryLiveTokenArrivesExactAndTheAdopterKeepsTiering) {
  const auto [backend, holds] = GetParam();
  if (const std::string why = peer_unavailable(backend); !why.empty()) GTEST_SKIP() << why;
  std::vector<std::string> args = {"--prompt", "40", "--steps", "160", "--interval", "8", "--beta", "0.4"};
  std::vector<std::string> adopter_args;
  if (holds == "t2") {
    args.insert(args.end(), {"--int8-pool-tokens", "256", "--int8-ratio", "0.5"});
    adopter_args = {"--int8-pool-tokens", "256"};
  }
  if (holds == "t3") args.insert(args.end(), {"--evict", "0.1"});
  DaemonUnderTest daemon(test_name());
  const Pair run = hand_off(daemon, backend, args, adopter_args);
  ASSERT_EQ(run.exporter.exit_code, 0) << run.exporter.out << daemon.log();
  ASSERT_EQ(run.adopter.exit_code, 0) << run.adopter.out << daemon.log();
  const WorkloadRun& from = run.exporter;
  const WorkloadRun& to = run.adopter;
  // The exported sequence really was tiered, and every part of it arrived where it was.
  EXPECT_GT(from.number("t0"), 0);
  EXPECT_GT(from.number("t1"), 0);
  EXPECT_EQ(to.number("peer_rows"), from.number("t0"));
  EXPECT_EQ(to.number("t1_rows"), from.number("t1"));
  EXPECT_EQ(to.number("t2_rows"), from.number("t2"));
  EXPECT_EQ(to.number("t3"), from.number("t3"));
  if (holds == "t2") {
    EXPECT_GT(from.number("t2"), 0);
  }
  if (holds == "t3") {
    EXPECT_GT(from.number("t3"), 0);
  }
  // Bit-identical T0/T1 rows, T2 within the int8 bound, nothing lost or named twice.
  EXPECT_EQ(to.number("mismatches"), 0);
  EXPECT_EQ(to.number("lost"), 0);
  // The adopted sequence is an ordinary one now: it decoded on and got plans of its own.
  EXPECT_EQ(to.number("steps"), 48);
  EXPECT_GT(to.number("plans"), 1);
  EXPECT_THAT(daemon.log(), HasSubstr("event=handoff_resolved"));
  EXPECT_THAT(daemon.log(), HasSubstr("applied=true"));
}

INSTANTIATE_TEST_SUITE_P(Handoff, HandsOff,
                         ::testing::Combine(::testing::Values("cpu", "cuda"), ::testing::Values("t1", "t2", "t3")),
                         [](const ::testing::TestParamInfo<Case>& c) {
                           return std::get<0>(c.param) + "_" + std::get<1>(c.param);
                         });

// A cuMem VMM buffer (what PyTorch's expandable segments allocate) cannot travel by legacy CUDA
// IPC: the exporter sends its POSIX fd, kvtierd passes a copy on, the adopter maps it.
TEST(Handoff, CudaVmmBufferCrossesAsAPosixFd) {
  if (const std::string why = peer_unavailable("cuda"); !why.empty()) GTEST_SKIP() << why;
  DaemonUnderTest daemon(test_name());
  const Pair run = hand_off(daemon, "cuda", {"--prompt", "40", "--steps", "120", "--beta", "0.4", "--buffer", "vmm"});
  ASSERT_EQ(run.exporter.exit_code, 0) << run.exporter.out << daemon.log();
  ASSERT_EQ(run.adopter.exit_code, 0) << run.adopter.out << daemon.log();
  EXPECT_GT(run.exporter.number("t1"), 0);
  EXPECT_EQ(run.adopter.number("peer_rows"), run.exporter.number("t0"));
  EXPECT_EQ(run.adopter.number("t1_rows"), run.exporter.number("t1"));
  EXPECT_EQ(run.adopter.number("mismatches"), 0);
  EXPECT_EQ(run.adopter.number("lost"), 0);
}

// An r_kv sequence opened with 24-float key digests: kvtierd parses its digests at that width in
// whichever process holds it, so the adopter is told the width and the policy (SequenceAdopted,
// 1.3) and pushes digests of 24 floats. With the default width of 16 in the adopter's library,
// its first digest push would be refused (24 is no multiple of 16); a multiple such as 32 would
// be split into records kvtierd refuses, ending the adopter's session.
TEST(Handoff, AnRkvSequenceKeepsItsKeyDigestWidthInTheAdopter) {
  DaemonUnderTest daemon(test_name());
  const std::vector<std::string> rkv = {"--policy", "r_kv", "--digest-dim", "24"};
  std::vector<std::string> exporter = {"--prompt", "40", "--steps", "120", "--beta", "0.4"};
  exporter.insert(exporter.end(), rkv.begin(), rkv.end());
  const Pair run = hand_off(daemon, "cpu", exporter, rkv);
  ASSERT_EQ(run.exporter.exit_code, 0) << run.exporter.out << daemon.log();
  ASSERT_EQ(run.adopter.exit_code, 0) << run.adopter.out << daemon.log();
  EXPECT_EQ(run.adopter.number("digest_dim"), 24);
  EXPECT_GT(run.exporter.number("t1"), 0);
  EXPECT_EQ(run.adopter.number("peer_rows"), run.exporter.number("t0"));
  EXPECT_EQ(run.adopter.number("mismatches"), 0);
  EXPECT_EQ(run.adopter.number("lost"), 0);
  // It decoded on, digests and all, and kept getting plans.
  EXPECT_EQ(run.adopter.number("steps"), 48);
  EXPECT_GT(run.adopter.number("plans"), 1);
  EXPECT_THAT(daemon.log(), HasSubstr("applied=true"));
  EXPECT_THAT(daemon.log(), ::testing::Not(HasSubstr("event=client_ring_error")));
}

TEST(Handoff, ARefusedHandOffReturnsTheSequenceToItsExporterAndTheTokenWorksAgain) {
  DaemonUnderTest daemon(test_name());
  const Pair run = hand_off(daemon, "cpu", {"--prompt", "40", "--steps", "120", "--beta", "0.4"}, {"--fail-first"});
  ASSERT_EQ(run.exporter.exit_code, 0) << run.exporter.out << daemon.log();
  ASSERT_EQ(run.adopter.exit_code, 0) << run.adopter.out << daemon.log();
  EXPECT_EQ(run.adopter.number("failed_handoffs"), 1);
  EXPECT_THAT(daemon.log(), HasSubstr("applied=false"));
  EXPECT_THAT(daemon.log(), HasSubstr("applied=true"));
  // The second hand-off carried the whole sequence: the refused one lost nothing.
  EXPECT_GT(run.exporter.number("t1"), 0);
  EXPECT_EQ(run.adopter.number("peer_rows"), run.exporter.number("t0"));
  EXPECT_EQ(run.adopter.number("t1_rows"), run.exporter.number("t1"));
  EXPECT_EQ(run.adopter.number("mismatches"), 0);
  EXPECT_EQ(run.adopter.number("lost"), 0);
}

TEST(Handoff, AnAdopterThatDiesMidHandOffGivesTheSequenceBackForAnotherAdopter) {
  DaemonUnderTest daemon(test_name());
  const auto token = daemon.dir() / "token", done = daemon.dir() / "done";
  const std::vector<std::string> common = {"--socket", daemon.socket().string(), "--token-file", token.string(),
                                           "--done-file", done.string()};
  std::vector<std::string> exporter = {KVTIER_TEST_HANDOFF_PEER, "--role", "export", "--prompt", "40", "--steps", "120",
                                       "--beta", "0.4"};
  exporter.insert(exporter.end(), common.begin(), common.end());
  ChildProcess a = ChildProcess::spawn(exporter, daemon.dir() / "exporter.log");
  std::vector<std::string> quitter = {KVTIER_TEST_HANDOFF_PEER, "--role", "adopt", "--exit-after-adopt"};
  quitter.insert(quitter.end(), common.begin(), common.end());
  const CommandResult gone = run_command(quitter, std::chrono::seconds(60));
  ASSERT_EQ(gone.exit_code, 0) << gone.out << daemon.log();
  ASSERT_THAT(gone.out, HasSubstr("abandoned=1"));
  // The daemon fails the abandoned hand-off once the process is gone; the next adopter retries
  // until the sequence is back.
  WorkloadRun second;
  ASSERT_TRUE(eventually(
      [&] {
        std::vector<std::string> adopter = {KVTIER_TEST_HANDOFF_PEER, "--role", "adopt", "--steps", "16"};
        adopter.insert(adopter.end(), common.begin(), common.end());
        const CommandResult r = run_command(adopter, std::chrono::seconds(60));
        second.exit_code = r.exit_code;
        second.out = r.out;
        return r.exit_code == 0;
      },
      std::chrono::seconds(20)))
      << second.out << daemon.log();
  const WorkloadRun first = finished(a, daemon.dir() / "exporter.log");
  ASSERT_EQ(first.exit_code, 0) << first.out << daemon.log();
  EXPECT_THAT(daemon.log(), HasSubstr("applied=false"));
  EXPECT_THAT(second.out, HasSubstr("mismatches=0 lost=0"));
}

TEST(Handoff, AnotherUserCannotAdoptEvenWithTheToken) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a peer under another uid";
  DaemonUnderTest daemon(test_name());
  ::chmod(daemon.socket().c_str(), 0666);  // let uid 65534 reach the socket; credentials decide
  const auto token = daemon.dir() / "token", done = daemon.dir() / "done";
  const std::vector<std::string> common = {"--socket", daemon.socket().string(), "--token-file", token.string(),
                                           "--done-file", done.string()};
  std::vector<std::string> exporter = {KVTIER_TEST_HANDOFF_PEER, "--role", "export", "--prompt", "40", "--steps", "64"};
  exporter.insert(exporter.end(), common.begin(), common.end());
  ChildProcess a = ChildProcess::spawn(exporter, daemon.dir() / "exporter.log");
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(token); }, std::chrono::seconds(60))) << daemon.log();
  std::string value;
  std::ifstream(token) >> value;
  char log[] = "/tmp/kvtier-handoff-XXXXXX";
  ::close(::mkstemp(log));
  ::chmod(log, 0666);
  ChildProcess stranger = ChildProcess::spawn({KVTIER_TEST_HANDOFF_PEER, "--role", "adopt", "--socket",
                                               daemon.socket().string(), "--token", value, "--expect-error",
                                               "permission_denied"},
                                              log, 65534);
  const int refused = stranger.wait(std::chrono::seconds(30)).value_or(-1);
  const std::string out = run_command({"/bin/cat", log}).out;
  ::unlink(log);
  EXPECT_EQ(refused, 0) << out << daemon.log();
  EXPECT_THAT(out, HasSubstr("uid 65534 may not adopt a sequence exported by uid 0"));
  // The export is untouched: its owner's user adopts it.
  std::vector<std::string> adopter = {KVTIER_TEST_HANDOFF_PEER, "--role", "adopt", "--steps", "8"};
  adopter.insert(adopter.end(), common.begin(), common.end());
  const CommandResult owner = run_command(adopter, std::chrono::seconds(60));
  EXPECT_EQ(owner.exit_code, 0) << owner.out << daemon.log();
  EXPECT_EQ(finished(a, daemon.dir() / "exporter.log").exit_code, 0);
}

TEST(Handoff, AnUnknownTokenIsRefusedAndTheAdopterKeepsItsSession) {
  DaemonUnderTest daemon(test_name());
  const auto token = daemon.dir() / "token";
  std::ofstream(token) << "12345\n";
  const CommandResult run = run_command({KVTIER_TEST_HANDOFF_PEER, "--role", "adopt", "--socket",
                                         daemon.socket().string(), "--token-file", token.string(), "--done-file",
                                         (daemon.dir() / "done").string(), "--expect-error", "not_found"},
                                        std::chrono::seconds(60));
  ASSERT_EQ(run.exit_code, 0) << run.out << daemon.log();
  EXPECT_THAT(run.out, HasSubstr("no sequence is waiting for an adopter"));
  EXPECT_THAT(daemon.log(), ::testing::Not(HasSubstr("event=session_error")));
}

}  // namespace
}  // namespace kvtier::testing
