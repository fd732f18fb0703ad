// The names a client sends (Hello.clientName, RegisterModel.modelName) reach kvtierd's log and
// `kvtierctl status`. kvtierd refuses control characters, ill-formed UTF-8 and names over 63
// bytes at the door (PROTOCOL.md §4 "Names"): no client forges a log line, writes escape
// sequences to an admin's terminal or breaks `kvtierctl --json status`, and the refused session
// ends alone.
#include <unistd.h>

#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvtier/protocol/version.hpp"
#include "kvtier/shm/layout.hpp"
#include "process.hpp"
#include "raw_peer.hpp"

namespace kvtier::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

// Every byte of `name` goes on the wire (Text carries NULs too).
void send_hello(RawPeer& peer, const std::string& name, wire::SessionRole role = wire::SessionRole::ENGINE) {
  capnp::MallocMessageBuilder message;
  auto hello = message.initRoot<wire::ClientMessage>().initHello();
  hello.setProtocolMajor(protocol::kProtocolMajor);
  hello.setProtocolMinor(protocol::kProtocolMinor);
  hello.setLayoutVersion(shm::kLayoutVersion);
  hello.setLayoutFingerprint(shm::kLayoutFingerprint);
  hello.setClientName(capnp::Text::Reader(name.data(), name.size()));
  hello.setRole(role);
  peer.send(message);
}

void send_register(RawPeer& peer, const std::string& model_name) {
  capnp::MallocMessageBuilder message;
  auto r = message.initRoot<wire::ClientMessage>().initRegisterModel();
  r.setNumLayers(2);
  r.setNumKvHeads(1);
  r.setHeadDim(16);
  r.setPoolTokens(16);
  r.setModelName(capnp::Text::Reader(model_name.data(), model_name.size()));
  peer.send(message);
}

// The reply's kind, and its code and message when it is an ErrorReply.
struct Reply {
  wire::DaemonMessage::Which which = wire::DaemonMessage::ERROR;
  Error error{Errc::kOk, "no reply"};
};

Reply next_reply(RawPeer& peer) {
  Reply out;
  auto reply = peer.receive();
  if (!reply) return out;
  auto root = reply->root<wire::DaemonMessage>();
  out.which = root.which();
  if (out.which == wire::DaemonMessage::ERROR) {
    out.error = Error{static_cast<Errc>(root.getError().getCode()), root.getError().getMessage().cStr()};
  }
  for (int fd; (fd = peer.take_fd()) >= 0;) ::close(fd);  // segments and doorbell: not needed here
  return out;
}

// An engine session named `name` with a model named `model`, welcomed and registered.
void engine_session(RawPeer& peer, const std::string& name, const std::string& model) {
  send_hello(peer, name);
  ASSERT_EQ(next_reply(peer).which, wire::DaemonMessage::WELCOME) << name;
  send_register(peer, model);
  ASSERT_EQ(next_reply(peer).which, wire::DaemonMessage::MODEL_REGISTERED) << model;
}

void expect_daemon_healthy(const DaemonUnderTest& daemon) {
  const CommandResult result = run_command(
      {KVTIER_TEST_WORKLOAD, "--socket", daemon.socket().string(), "--name", "healthy", "--steps", "10"});
  EXPECT_EQ(result.exit_code, 0) << result.out << daemon.log();
}

// A name within 63 bytes: "x", an ESC sequence that erases the line, and a made-up log line.
const std::string kForgedLine = "x\x1b[2K\nevent=hello client_id=1 name=forged-root role=admin";

TEST(UntrustedNames, AClientNameWithEscapeAndNewlineIsRefusedAndForgesNoLogLine) {
  DaemonUnderTest daemon(test_name());
  RawPeer bystander(daemon.socket());
  engine_session(bystander, "bystander", "model-b");
  RawPeer rogue(daemon.socket());
  send_hello(rogue, kForgedLine);
  const Reply refused = next_reply(rogue);
  EXPECT_EQ(refused.error.code, Errc::kInvalidArgument) << refused.error.message;
  EXPECT_THAT(refused.error.message, HasSubstr("Hello.clientName: byte 1 starts control character U+001B"));
  EXPECT_THAT(refused.error.message, HasSubstr("without control characters (C0, DEL, C1)"));
  EXPECT_TRUE(rogue.closed_by_daemon());
  // The session already open keeps working, and so does a new one.
  capnp::MallocMessageBuilder open;
  open.initRoot<wire::ClientMessage>().initOpenSequence().setPromptLength(4);
  bystander.send(open);
  EXPECT_EQ(next_reply(bystander).which, wire::DaemonMessage::SEQUENCE_OPENED);
  expect_daemon_healthy(daemon);
  const std::string log = daemon.log();
  EXPECT_THAT(log, HasSubstr("event=session_error"));  // the refusal is logged, without the name
  EXPECT_THAT(log, Not(HasSubstr("forged-root")));
  EXPECT_EQ(log.find('\x1b'), std::string::npos);
}

TEST(UntrustedNames, NamesThatAreNotPrintableUtf8OrTooLongAreRefused) {
  DaemonUnderTest daemon(test_name());
  RawPeer bystander(daemon.socket());
  engine_session(bystander, "bystander", "model-b");
  const std::pair<std::string, std::string> cases[] = {
      {"bad\xff", "byte 3 (0xff) is not well-formed UTF-8"},
      {"overlong-\xc0\xaf", "byte 9 (0xc0) is not well-formed UTF-8"},
      {"surrogate-\xed\xa0\x80", "byte 10 (0xed) is not well-formed UTF-8"},
      {"cut-\xe6\x97", "byte 4 (0xe6) is not well-formed UTF-8"},
      {"c1-\xc2\x9b" "31m", "byte 3 starts control character U+009B"},
      {"del-\x7f", "byte 4 starts control character U+007F"},
      {std::string("nul-\0-hidden", 12), "byte 4 starts control character U+0000"},
      {std::string(64, 'a'), "64 bytes is too long"},
  };
  for (const auto& [name, why] : cases) {
    RawPeer rogue(daemon.socket());
    send_hello(rogue, name, wire::SessionRole::ADMIN);
    const Reply refused = next_reply(rogue);
    EXPECT_EQ(refused.error.code, Errc::kInvalidArgument) << why;
    EXPECT_THAT(refused.error.message, HasSubstr("Hello.clientName: " + why));
    EXPECT_TRUE(rogue.closed_by_daemon()) << why;
  }
  // At the limit, in multi-byte characters: 21 x 3 bytes.
  std::string longest;
  for (int i = 0; i < 21; ++i) longest += "\xe8\xaa\x9e";  // 語
  RawPeer ok(daemon.socket());
  send_hello(ok, longest, wire::SessionRole::ADMIN);
  EXPECT_EQ(next_reply(ok).which, wire::DaemonMessage::WELCOME);
  capnp::MallocMessageBuilder open;
  open.initRoot<wire::ClientMessage>().initOpenSequence().setPromptLength(4);
  bystander.send(open);
  EXPECT_EQ(next_reply(bystander).which, wire::DaemonMessage::SEQUENCE_OPENED);
  expect_daemon_healthy(daemon);
}

TEST(UntrustedNames, AModelNameWithControlCharactersIsRefusedAndTheSessionStays) {
  DaemonUnderTest daemon(test_name());
  RawPeer client(daemon.socket());
  send_hello(client, "engine");
  ASSERT_EQ(next_reply(client).which, wire::DaemonMessage::WELCOME);
  send_register(client, "llama\nevent=forged-model");
  const Reply refused = next_reply(client);
  EXPECT_EQ(refused.error.code, Errc::kInvalidArgument);
  EXPECT_THAT(refused.error.message, HasSubstr("RegisterModel.modelName: byte 5 starts control character U+000A"));
  send_register(client, "llama-3");  // corrected: the same session registers
  EXPECT_EQ(next_reply(client).which, wire::DaemonMessage::MODEL_REGISTERED);
  EXPECT_THAT(daemon.log(), Not(HasSubstr("forged-model")));
}

TEST(UntrustedNames, TheClientLibraryReportsARefusedName) {
  DaemonUnderTest daemon(test_name());
  const CommandResult run = run_command(
      {KVTIER_TEST_WORKLOAD, "--socket", daemon.socket().string(), "--name", "bad\x1b[2Jname", "--steps", "1"});
  EXPECT_NE(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("Hello.clientName: byte 3 starts control character U+001B"));
}

// Parses `json` and checks it lists every one of `names` as a client or model name, and no name
// with a control character or U+FFFD (a byte that was not UTF-8). Exit 0 and "ok" when so.
const char* const kCheckStatusJson = R"PY(
import json, sys
with open(sys.argv[1], encoding="utf-8") as f:
    status = json.load(f)
names = [c["name"] for c in status["clients"]] + [c["model"]["name"] for c in status["clients"]]
bad = [n for n in names if any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F or ch == "\uFFFD" for ch in n)]
missing = [n for n in sys.argv[2:] if n not in names]
print("bad", ascii(bad), "missing", ascii(missing), "names", ascii(names))
sys.exit(1 if bad or missing else 0)
)PY";

TEST(UntrustedNames, StatusIsValidJsonAndPlainTextForEveryNameThatGetsIn) {
  DaemonUnderTest daemon(test_name());
  const std::vector<std::string> odd = {"quote\"back\\slash {json}: [1]", "\xe6\x97\xa5\xe6\x9c\xac-engine",
                                        "emoji-\xf0\x9f\x98\x80", "model \"\xc3\xa9t\xc3\xa9\""};
  std::vector<std::unique_ptr<RawPeer>> kept;
  for (std::size_t i = 0; i + 1 < odd.size(); i += 2) {
    kept.push_back(std::make_unique<RawPeer>(daemon.socket()));
    engine_session(*kept.back(), odd[i], odd[i + 1]);
  }
  // What must not get in: each attempt is refused, so none of it reaches the status.
  for (const std::string& hostile : {kForgedLine, std::string("bad\xff\xfe"), std::string("c1-\xc2\x85")}) {
    RawPeer rogue(daemon.socket());
    send_hello(rogue, hostile);
    EXPECT_EQ(next_reply(rogue).error.code, Errc::kInvalidArgument);
  }
  RawPeer rogue_model(daemon.socket());
  send_hello(rogue_model, "engine-with-odd-model");
  ASSERT_EQ(next_reply(rogue_model).which, wire::DaemonMessage::WELCOME);
  send_register(rogue_model, "m\x1b]0;title\x07");
  EXPECT_EQ(next_reply(rogue_model).error.code, Errc::kInvalidArgument);

  const CommandResult json = daemon.ctl({"--json", "status"});
  ASSERT_EQ(json.exit_code, 0) << json.out;
  const auto file = daemon.dir() / "status.json";
  std::ofstream(file) << json.out;
  std::vector<std::string> check = {"/usr/bin/env", "python3", "-c", kCheckStatusJson, file.string()};
  check.insert(check.end(), odd.begin(), odd.end());
  const CommandResult parsed = run_command(check);
  EXPECT_EQ(parsed.exit_code, 0) << parsed.out << "\n" << json.out;

  const CommandResult text = daemon.ctl({"status"});
  ASSERT_EQ(text.exit_code, 0) << text.out;
  for (const char c : text.out) {
    const auto byte = static_cast<unsigned char>(c);
    EXPECT_FALSE((byte < 0x20 && byte != '\n') || byte == 0x7f) << "raw control byte " << int{byte} << " in\n" << text.out;
  }
  EXPECT_EQ(text.out.find("\xc2\x85"), std::string::npos);
  EXPECT_THAT(text.out, HasSubstr("\xe6\x97\xa5\xe6\x9c\xac-engine"));
  EXPECT_THAT(text.out, HasSubstr("quote\"back\\\\slash {json}: [1]"));  // a backslash shows doubled
  EXPECT_THAT(text.out, Not(HasSubstr("forged-root")));
}

}  // namespace
}  // namespace kvtier::testing
