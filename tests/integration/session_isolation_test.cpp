// Bad peers end only their own session: version mismatch, malformed and oversized frames,
// requests out of order, bad geometry, admin requests from non-admin peers, limits.
#include <signal.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvtier/protocol/version.hpp"
#include "kvtier/shm/layout.hpp"
#include "process.hpp"
#include "raw_peer.hpp"

namespace kvtier::testing {
namespace {

using ::testing::HasSubstr;

std::string test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

// The daemon still serves a well-behaved client after whatever the test did.
void expect_daemon_healthy(const DaemonUnderTest& daemon) {
  const CommandResult result = run_command(
      {KVTIER_TEST_WORKLOAD, "--socket", daemon.socket().string(), "--name", "healthy", "--steps", "10"});
  EXPECT_EQ(result.exit_code, 0) << result.out << daemon.log();
}

Error error_of(protocol::MessageIn& message) {
  auto root = message.root<wire::DaemonMessage>();
  EXPECT_EQ(root.which(), wire::DaemonMessage::ERROR);
  return Error{static_cast<Errc>(root.getError().getCode()), root.getError().getMessage().cStr()};
}

// Sends a Hello the daemon must refuse; its error.
Error hello_refused(RawPeer& peer) {
  peer.send_hello(protocol::kProtocolMajor, protocol::kProtocolMinor, shm::kLayoutVersion, shm::kLayoutFingerprint);
  auto reply = peer.receive();
  if (!reply) return Error{Errc::kInternal, "no reply to Hello"};
  return error_of(*reply);
}

void hello_ok(RawPeer& peer, wire::SessionRole role = wire::SessionRole::ENGINE) {
  peer.send_hello(protocol::kProtocolMajor, protocol::kProtocolMinor, shm::kLayoutVersion, shm::kLayoutFingerprint, role);
  auto welcome = peer.receive();
  ASSERT_TRUE(welcome);
  ASSERT_EQ(welcome->root<wire::DaemonMessage>().which(), wire::DaemonMessage::WELCOME);
}

TEST(SessionIsolation, ProtocolMajorMismatchIsRefusedNamingBothVersions) {
  DaemonUnderTest daemon(test_name());
  RawPeer peer(daemon.socket());
  peer.send_hello(99, 3, shm::kLayoutVersion, shm::kLayoutFingerprint);
  auto reply = peer.receive();
  ASSERT_TRUE(reply);
  auto root = reply->root<wire::DaemonMessage>();
  ASSERT_EQ(root.which(), wire::DaemonMessage::VERSION_MISMATCH);
  auto mismatch = root.getVersionMismatch();
  EXPECT_EQ(mismatch.getDaemonProtocolMajor(), protocol::kProtocolMajor);
  EXPECT_EQ(mismatch.getClientProtocolMajor(), 99);
  EXPECT_THAT(std::string(mismatch.getMessage().cStr()), HasSubstr("daemon speaks protocol 1.7"));
  EXPECT_THAT(std::string(mismatch.getMessage().cStr()), HasSubstr("client speaks protocol 99.3"));
  EXPECT_TRUE(peer.closed_by_daemon());
  expect_daemon_healthy(daemon);
}

TEST(SessionIsolation, LayoutFingerprintMismatchIsRefused) {
  DaemonUnderTest daemon(test_name());
  RawPeer peer(daemon.socket());
  peer.send_hello(protocol::kProtocolMajor, protocol::kProtocolMinor, shm::kLayoutVersion, 0xdeadbeef);
  auto reply = peer.receive();
  ASSERT_TRUE(reply);
  auto mismatch = reply->root<wire::DaemonMessage>().getVersionMismatch();
  EXPECT_EQ(mismatch.getClientLayoutFingerprint(), 0xdeadbeefu);
  EXPECT_EQ(mismatch.getDaemonLayoutFingerprint(), shm::kLayoutFingerprint);
  EXPECT_TRUE(peer.closed_by_daemon());
}

TEST(SessionIsolation, OversizedFrameEndsOnlyThatSession) {
  DaemonUnderTest daemon(test_name());
  RawPeer good(daemon.socket());
  hello_ok(good, wire::SessionRole::ADMIN);
  RawPeer bad(daemon.socket());
  bad.send_bytes({std::byte{0xf8}, std::byte{0xff}, std::byte{0xff}, std::byte{0x7f}});  // ~2 GiB announced
  auto reply = bad.receive();
  ASSERT_TRUE(reply);
  const Error error = error_of(*reply);
  EXPECT_EQ(error.code, Errc::kLimitExceeded);
  EXPECT_THAT(error.message, HasSubstr("exceeds limit"));
  EXPECT_TRUE(bad.closed_by_daemon());
  // The other session is untouched.
  capnp::MallocMessageBuilder status;
  status.initRoot<wire::ClientMessage>().initStatusRequest();
  good.send(status);
  auto answer = good.receive();
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->root<wire::DaemonMessage>().which(), wire::DaemonMessage::STATUS_REPLY);
  expect_daemon_healthy(daemon);
}

TEST(SessionIsolation, GarbagePayloadIsAProtocolError) {
  DaemonUnderTest daemon(test_name());
  RawPeer bad(daemon.socket());
  std::vector<std::byte> frame = {std::byte{16}, std::byte{0}, std::byte{0}, std::byte{0}};
  for (int i = 0; i < 16; ++i) frame.push_back(std::byte{0xab});
  bad.send_bytes(frame);
  auto reply = bad.receive();
  ASSERT_TRUE(reply);
  EXPECT_EQ(error_of(*reply).code, Errc::kProtocol);
  EXPECT_TRUE(bad.closed_by_daemon());
  expect_daemon_healthy(daemon);
}

TEST(SessionIsolation, RequestBeforeHelloIsRefused) {
  DaemonUnderTest daemon(test_name());
  RawPeer bad(daemon.socket());
  capnp::MallocMessageBuilder open;
  open.initRoot<wire::ClientMessage>().initOpenSequence().setPromptLength(5);
  bad.send(open);
  auto reply = bad.receive();
  ASSERT_TRUE(reply);
  const Error error = error_of(*reply);
  EXPECT_EQ(error.code, Errc::kProtocol);
  EXPECT_THAT(error.message, HasSubstr("first message must be Hello"));
  EXPECT_TRUE(bad.closed_by_daemon());
}

TEST(SessionIsolation, AbsurdGeometryIsRefusedAndTheSessionStaysUsable) {
  DaemonUnderTest daemon(test_name());
  RawPeer peer(daemon.socket());
  hello_ok(peer);
  capnp::MallocMessageBuilder reg;
  auto r = reg.initRoot<wire::ClientMessage>().initRegisterModel();
  r.setNumLayers(0);
  r.setNumKvHeads(8);
  r.setHeadDim(128);
  r.setPoolTokens(1024);
  peer.send(reg);
  auto reply = peer.receive();
  ASSERT_TRUE(reply);
  const Error error = error_of(*reply);
  EXPECT_EQ(error.code, Errc::kInvalidArgument);
  EXPECT_THAT(error.message, HasSubstr("bad KV geometry"));
  EXPECT_THAT(error.message, HasSubstr("num_layers"));
  // A request error leaves the session usable: a corrected request succeeds on it.
  r.setNumLayers(4);
  peer.send(reg);
  auto registered = peer.receive();
  ASSERT_TRUE(registered);
  EXPECT_EQ(registered->root<wire::DaemonMessage>().which(), wire::DaemonMessage::MODEL_REGISTERED);
  expect_daemon_healthy(daemon);
}

TEST(SessionIsolation, PoolBeyondThePerClientLimitIsRefused) {
  DaemonUnderTest daemon(test_name(), {"--set", "limits.max_pool_bytes_per_client=1048576"});
  RawPeer peer(daemon.socket());
  hello_ok(peer);
  capnp::MallocMessageBuilder reg;
  auto r = reg.initRoot<wire::ClientMessage>().initRegisterModel();
  r.setNumLayers(32);
  r.setNumKvHeads(8);
  r.setHeadDim(128);
  r.setDtype(wire::KvDtype::BF16);
  r.setPoolTokens(4096);
  peer.send(reg);
  auto reply = peer.receive();
  ASSERT_TRUE(reply);
  const Error error = error_of(*reply);
  EXPECT_EQ(error.code, Errc::kLimitExceeded);
  EXPECT_THAT(error.message, HasSubstr("limits.max_pool_bytes_per_client=1048576"));
}

TEST(SessionIsolation, ClientsBeyondMaxClientsAreRefused) {
  DaemonUnderTest daemon(test_name(), {"--set", "limits.max_clients=1"});
  RawPeer first(daemon.socket());
  hello_ok(first);
  RawPeer second(daemon.socket());
  EXPECT_EQ(hello_refused(second).code, Errc::kLimitExceeded);
}

TEST(SessionIsolation, AConnectionThatSendsNoHelloIsClosedAfterTheHelloTimeout) {
  DaemonUnderTest daemon(test_name(), {"--set", "limits.hello_timeout_ms=200"});
  RawPeer silent(daemon.socket());  // never sends a byte, so the daemon must close it
  auto reply = silent.receive();
  ASSERT_TRUE(reply) << daemon.log();
  const Error error = error_of(*reply);
  EXPECT_EQ(error.code, Errc::kLimitExceeded);
  EXPECT_THAT(error.message, HasSubstr("no Hello within limits.hello_timeout_ms=200"));
  EXPECT_TRUE(silent.closed_by_daemon());
  // Only the silent peer's fate is asserted: the daemon itself carries on.
  EXPECT_TRUE(daemon.process().running());
}

TEST(SessionIsolation, ConnectionsBeyondMaxPendingConnectionsAreRefusedUntilOneSaysHello) {
  DaemonUnderTest daemon(test_name(), {"--set", "limits.max_pending_connections=2", "--set",
                                       "limits.hello_timeout_ms=3600000"});
  RawPeer first(daemon.socket()), second(daemon.socket());
  RawPeer third(daemon.socket());  // accepted after the first two: both still wait for Hello
  auto reply = third.receive();
  ASSERT_TRUE(reply) << daemon.log();
  const Error error = error_of(*reply);
  EXPECT_EQ(error.code, Errc::kLimitExceeded);
  EXPECT_THAT(error.message, HasSubstr("2 connections are waiting to send Hello, limit "
                                       "limits.max_pending_connections=2"));
  EXPECT_TRUE(third.closed_by_daemon());
  hello_ok(first, wire::SessionRole::ADMIN);  // the daemon answered: one is pending now
  RawPeer fourth(daemon.socket());
  hello_ok(fourth, wire::SessionRole::ADMIN);
  expect_daemon_healthy(daemon);
}

TEST(SessionIsolation, DisconnectedClientsWhoseProcessLivesCountAgainstMaxClients) {
  DaemonUnderTest daemon(test_name(), {"--set", "limits.max_clients=2"});
  {
    RawPeer first(daemon.socket());
    hello_ok(first);
  }  // disconnected; this process, which holds its segments' fds, lives on
  ASSERT_TRUE(eventually([&] { return daemon.log().find("event=client_disconnected") != std::string::npos; }))
      << daemon.log();
  RawPeer second(daemon.socket());
  hello_ok(second);
  RawPeer third(daemon.socket());
  const Error error = hello_refused(third);
  EXPECT_EQ(error.code, Errc::kLimitExceeded);
  EXPECT_THAT(error.message, HasSubstr("daemon serves 2 clients (1 of them disconnected, their pools held until "
                                       "their processes exit), limit limits.max_clients=2"));
  // Status lists both: the disconnected one as closing.
  const std::string json = daemon.ctl({"status", "--json"}).out;
  EXPECT_THAT(json, HasSubstr("\"closing\":true"));
  EXPECT_THAT(json, HasSubstr("\"closing\":false"));
  EXPECT_THAT(daemon.ctl({"status"}).out, HasSubstr("closing: disconnected, pools held until the process exits"));
}

TEST(SessionIsolation, AdminRequestsAreRefusedForANonAdminPeer) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a peer under another uid";
  DaemonUnderTest daemon(test_name(), {"--set", "daemon.admin_group=kvtier-no-such-group"});
  ::chmod(daemon.socket().c_str(), 0666);  // let uid 65534 reach the socket; credentials decide
  const auto as_nobody = [&](std::vector<std::string> args) {
    char path[] = "/tmp/kvtier-ctl-XXXXXX";
    ::close(::mkstemp(path));
    ::chmod(path, 0666);
    std::vector<std::string> argv = {KVTIER_TEST_KVTIERCTL, "--socket", daemon.socket().string()};
    argv.insert(argv.end(), args.begin(), args.end());
    ChildProcess child = ChildProcess::spawn(argv, path, 65534);
    CommandResult r{child.wait(std::chrono::seconds(10)).value_or(-1), {}};
    r.out = run_command({"/bin/cat", path}).out;
    ::unlink(path);
    return r;
  };
  // Status, events (1.5) and placement (1.5) all need what status needs.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"status"}, std::vector<std::string>{"events"}, std::vector<std::string>{"sequence", "1", "1"}}) {
    const CommandResult result = as_nobody(args);
    EXPECT_EQ(result.exit_code, 1) << args[0] << ": " << result.out;
    EXPECT_THAT(result.out, HasSubstr("permission_denied")) << args[0];
    EXPECT_THAT(result.out, HasSubstr("uid 65534 is neither root nor in admin group")) << args[0];
  }
  EXPECT_EQ(daemon.ctl({"status"}).exit_code, 0);  // root still is admin
  EXPECT_EQ(daemon.ctl({"events"}).exit_code, 0);
}

TEST(SessionIsolation, AnEngineSessionAskingForEventsIsRefusedAndTheRefusalIsAnEvent) {
  DaemonUnderTest daemon(test_name());
  RawPeer engine(daemon.socket());
  hello_ok(engine, wire::SessionRole::ENGINE);
  capnp::MallocMessageBuilder events;
  events.initRoot<wire::ClientMessage>().initEventsRequest().setLimit(10);
  engine.send(events);
  auto reply = engine.receive();
  ASSERT_TRUE(reply);
  const Error error = error_of(*reply);
  EXPECT_EQ(error.code, Errc::kPermissionDenied);
  EXPECT_THAT(error.message, HasSubstr("EventsRequest needs the admin role"));
  EXPECT_TRUE(engine.closed_by_daemon());
  const std::string listed = daemon.ctl({"events", "--json"}).out;
  EXPECT_THAT(listed, HasSubstr("\"kind\":\"session_error\""));
  EXPECT_THAT(listed, HasSubstr("permission_denied: EventsRequest needs the admin role"));
  expect_daemon_healthy(daemon);
}

}  // namespace
}  // namespace kvtier::testing
