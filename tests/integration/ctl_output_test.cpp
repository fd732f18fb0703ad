// kvtierctl prints what kvtierd says about other clients. kvtierd refuses names that are not
// printable UTF-8, but kvtierctl does not rely on it: whatever bytes arrive (a daemon from before
// the rule, a broken one), `status` writes no raw control character and `--json status` stays
// valid JSON. A fake daemon on the test's own socket answers kvtierctl's Hello and StatusRequest.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvtier/protocol/control.capnp.h"
#include "kvtier/protocol/framing.hpp"
#include "kvtier/protocol/version.hpp"
#include "kvtier/shm/layout.hpp"
#include "process.hpp"

namespace kvtier::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// An ESC sequence (red), CR LF and a line of its own, then bytes that are not UTF-8: lone
// 0xff 0xfe, an overlong '/', a UTF-16 surrogate.
const std::string kHostileName = "\x1b[31mred\r\nforged line\xff\xfe\xc0\xaf\xed\xa0\x80";
// C1 CSI (U+009B), DEL, a tab.
const std::string kHostileModel = "m\xc2\x9b" "1m\x7f\tx";
// An OSC sequence that sets the terminal's title.
const std::string kHostileVersion = "0.1\x1b]0;owned\x07";

// One listening socket in its own directory; serve() answers one kvtierctl connection.
class FakeDaemon {
 public:
  FakeDaemon() {
    char tmpl[] = "/tmp/kvtier-fake-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    socket_ = dir_ / "kvtierd.sock";
    listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    socket_.native().copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(listener_, 1) != 0) {
      ADD_FAILURE() << "cannot listen on " << socket_;
    }
  }
  ~FakeDaemon() {
    ::close(listener_);
    std::filesystem::remove_all(dir_);
  }

  const std::filesystem::path& socket() const { return socket_; }
  const std::filesystem::path& dir() const { return dir_; }

  // Welcome for the Hello, then the StatusReply `fill` builds for the StatusRequest.
  void serve(const std::function<void(wire::StatusReply::Builder)>& fill) {
    pollfd pfd{listener_, POLLIN, 0};
    ASSERT_EQ(::poll(&pfd, 1, 30'000), 1) << "kvtierctl did not connect";
    const int peer = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    ASSERT_GE(peer, 0);
    protocol::FrameDecoder decoder;
    const auto receive = [&]() -> wire::ClientMessage::Which {
      for (;;) {
        if (auto frame = decoder.next_frame()) {
          auto message = protocol::read_message(std::move(*frame));
          return message ? message->root<wire::ClientMessage>().which() : wire::ClientMessage::HELLO;
        }
        std::array<std::byte, 4096> buf;
        pollfd in{peer, POLLIN, 0};
        if (::poll(&in, 1, 30'000) != 1) return wire::ClientMessage::REGISTER_MODEL;  // none: fails below
        const ssize_t n = ::recv(peer, buf.data(), buf.size(), 0);
        if (n <= 0 || !decoder.feed(std::span(buf.data(), static_cast<std::size_t>(n)))) {
          return wire::ClientMessage::REGISTER_MODEL;
        }
      }
    };
    const auto reply = [&](capnp::MessageBuilder& message) {
      const auto bytes = protocol::encode_frame(message).value();
      ASSERT_EQ(::send(peer, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
    };
    EXPECT_EQ(receive(), wire::ClientMessage::HELLO);
    capnp::MallocMessageBuilder welcome_message;
    auto welcome = welcome_message.initRoot<wire::DaemonMessage>().initWelcome();
    welcome.setProtocolMajor(protocol::kProtocolMajor);
    welcome.setProtocolMinor(protocol::kProtocolMinor);
    welcome.setLayoutVersion(shm::kLayoutVersion);
    welcome.setLayoutFingerprint(shm::kLayoutFingerprint);
    welcome.setClientId(1);
    welcome.setDaemonVersion(kHostileVersion);
    reply(welcome_message);
    EXPECT_EQ(receive(), wire::ClientMessage::STATUS_REQUEST);
    capnp::MallocMessageBuilder status_message;
    fill(status_message.initRoot<wire::DaemonMessage>().initStatusReply());
    reply(status_message);
    ::close(peer);
  }

 private:
  std::filesystem::path dir_, socket_;
  int listener_ = -1;
};

void hostile_status(wire::StatusReply::Builder status) {
  status.setDaemonVersion(kHostileVersion);
  status.setProtocolMajor(protocol::kProtocolMajor);
  status.setProtocolMinor(protocol::kProtocolMinor);
  auto client = status.initClients(1)[0];
  client.setClientId(7);
  client.setName(kHostileName);
  client.setModelName(kHostileModel);
  client.setNumLayers(2);
  auto sequence = client.initSequences(1)[0];
  sequence.setSequenceId(1);
  sequence.setDestroyedFraction(std::numeric_limits<double>::quiet_NaN());
  sequence.setHbmRatio(std::numeric_limits<double>::infinity());
}

// kvtierctl `args` against the fake daemon; its stdout and stderr.
CommandResult ctl_against_fake(const std::vector<std::string>& args) {
  FakeDaemon fake;
  std::vector<std::string> argv = {KVTIER_TEST_KVTIERCTL, "--socket", fake.socket().string()};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto log = fake.dir() / "kvtierctl.out";
  CommandResult result;
  {
    ChildProcess ctl = ChildProcess::spawn(argv, log);
    fake.serve(hostile_status);
    result.exit_code = ctl.wait(std::chrono::seconds(30)).value_or(-1);
  }
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  result.out = ss.str();
  return result;
}

// Exit 0 when the file is JSON whose strings decode to what kvtierctl was sent, each byte that
// was not UTF-8 as U+FFFD and the non-finite numbers as null.
const char* const kCheckJson = R"PY(
import json, sys
with open(sys.argv[1], encoding="utf-8") as f:
    status = json.load(f)
client = status["clients"][0]
sequence = client["sequences"][0]
expect = {
    "name": "\x1b[31mred\r\nforged line" + "\uFFFD" * 7,
    "model": "m\x9b1m\x7f\tx",
    "version": "0.1\x1b]0;owned\x07",
}
got = {"name": client["name"], "model": client["model"]["name"], "version": status["daemon_version"]}
print("got", ascii(got), "expected", ascii(expect))
ok = got == expect and sequence["destroyed_fraction"] is None and sequence["hbm_ratio"] is None
sys.exit(0 if ok else 1)
)PY";

TEST(KvtierctlOutput, JsonStaysValidWhateverBytesTheDaemonSends) {
  const CommandResult json = ctl_against_fake({"--json", "status"});
  ASSERT_EQ(json.exit_code, 0) << json.out;
  for (const char c : json.out) {  // every control character escaped, the newline at the end aside
    const auto byte = static_cast<unsigned char>(c);
    EXPECT_FALSE((byte < 0x20 && byte != '\n') || byte == 0x7f) << "raw byte " << int{byte} << " in " << json.out;
  }
  char path[] = "/tmp/kvtier-json-XXXXXX";
  ::close(::mkstemp(path));
  std::ofstream(path) << json.out;
  const CommandResult parsed = run_command({"/usr/bin/env", "python3", "-c", kCheckJson, path});
  ::unlink(path);
  EXPECT_EQ(parsed.exit_code, 0) << parsed.out << "\n" << json.out;
}

TEST(KvtierctlOutput, TextStatusEscapesControlCharactersAndBytesThatAreNotUtf8) {
  const CommandResult text = ctl_against_fake({"status"});
  ASSERT_EQ(text.exit_code, 0) << text.out;
  // Only printable ASCII and line ends: every hostile byte above was a control character or no UTF-8.
  for (const char c : text.out) {
    const auto byte = static_cast<unsigned char>(c);
    EXPECT_TRUE((byte >= 0x20 && byte < 0x7f) || byte == '\n') << "raw byte " << int{byte} << " in\n" << text.out;
  }
  EXPECT_THAT(text.out, HasSubstr("\\x1b[31mred\\x0d\\x0aforged line\\xff\\xfe\\xc0\\xaf\\xed\\xa0\\x80"));
  EXPECT_THAT(text.out, HasSubstr("model m\\u009b1m\\x7f\\x09x"));
  EXPECT_THAT(text.out, HasSubstr("kvtierd 0.1\\x1b]0;owned\\x07"));
  EXPECT_THAT(text.out, Not(HasSubstr("\nforged line")));
}

}  // namespace
}  // namespace kvtier::testing
