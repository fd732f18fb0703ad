// kvtierd's Prometheus endpoint with the real tools: a scrape while a real engine client holds
// its sequences matches `kvtierctl status` and passes `promtool check metrics`; a real Prometheus
// server scrapes the daemon and answers a query for a counter the workload moved.
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "process.hpp"

namespace kvtier::testing {
namespace {

using Json = nlohmann::json;

struct HostPort {
  std::string host;
  int port = 0;
};

HostPort split(const std::string& address) {
  const auto colon = address.rfind(':');
  return {address.substr(0, colon), std::stoi(address.substr(colon + 1))};
}

// A held workload: its last step and acknowledgement are resolved, so status and metrics stand
// still until it is told to go.
class HeldWorkload {
 public:
  HeldWorkload(const DaemonUnderTest& daemon, const std::string& name)
      : log_(daemon.dir() / (name + ".log")),
        process_(ChildProcess::spawn({KVTIER_TEST_WORKLOAD, "--socket", daemon.socket().string(), "--name", name,
                                      "--sequences", "2", "--prompt", "16", "--steps", "96", "--interval", "16",
                                      "--window", "8", "--beta", "0.3", "--evict", "0.1", "--hold"},
                                     log_)) {
    EXPECT_TRUE(wait_for_line(log_, "holding name=" + name)) << read_log(log_);
  }
  ~HeldWorkload() {
    process_.signal(SIGTERM);
    EXPECT_EQ(process_.wait(std::chrono::seconds(30)), std::optional<int>(0)) << read_log(log_);
  }

 private:
  std::filesystem::path log_;
  ChildProcess process_;
};

Json status(const DaemonUnderTest& daemon) {
  const CommandResult result = daemon.ctl({"--json", "status"});
  EXPECT_EQ(result.exit_code, 0) << result.out;
  return Json::parse(result.out);
}

const Json& client_named(const Json& status, const std::string& name) {
  for (const Json& c : status["clients"]) {
    if (c["name"] == name) return c;
  }
  throw std::runtime_error("no client " + name + " in " + status.dump());
}

std::string scrape(const std::string& address) {
  const HostPort where = split(address);
  httplib::Client http(where.host, where.port);
  const auto response = http.Get("/metrics");
  if (!response) throw std::runtime_error("no response from " + address);
  EXPECT_EQ(response->status, 200) << response->body;
  EXPECT_EQ(response->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  return response->body;
}

// The value of the one sample of `family` whose labels include every `label="value"` given.
double sample(const std::string& body, const std::string& family, const std::vector<std::string>& labels) {
  std::istringstream lines(body);
  double found = -1;
  int matches = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(family + "{", 0) != 0) continue;
    const std::string label_text = line.substr(0, line.rfind('}') + 1);
    bool all = true;
    for (const std::string& label : labels) all = all && label_text.find(label) != std::string::npos;
    if (!all) continue;
    found = std::stod(line.substr(line.rfind(' ') + 1));
    ++matches;
  }
  EXPECT_EQ(matches, 1) << family << " " << ::testing::PrintToString(labels) << "\n" << body;
  return found;
}

long sum_over_sequences(const Json& client, const char* key) {
  long sum = 0;
  for (const Json& s : client["sequences"]) sum += s[key].get<long>();
  return sum;
}

TEST(Metrics, AScrapeAgreesWithStatusAndPassesPromtool) {
  DaemonUnderTest daemon("metrics-scrape", {"--set", "metrics.listen=127.0.0.1:0"});
  HeldWorkload workload(daemon, "scraped");
  const Json s = status(daemon);
  const std::string address = s["metrics_address"];
  ASSERT_TRUE(std::regex_match(address, std::regex(R"(127\.0\.0\.1:[1-9][0-9]*)"))) << address;
  const Json& c = client_named(s, "scraped");
  ASSERT_GT(c["counters"]["plans_acked"].get<long>(), 0) << s.dump();

  const std::string body = scrape(address);
  const std::string who = "client=\"scraped\"";
  EXPECT_EQ(sample(body, "kvtier_plans_acked_total", {who}), c["counters"]["plans_acked"].get<double>());
  EXPECT_EQ(sample(body, "kvtier_plans_sent_total", {who}), c["counters"]["plans_sent"].get<double>());
  EXPECT_EQ(sample(body, "kvtier_score_records_total", {who}), c["counters"]["score_records"].get<double>());
  EXPECT_EQ(sample(body, "kvtier_sequences", {who}), 2);
  for (const char* tier : {"t0", "t1", "t2", "t3"}) {
    EXPECT_EQ(sample(body, "kvtier_tokens", {who, "tier=\"" + std::string(tier) + "\""}),
              static_cast<double>(sum_over_sequences(c, tier)))
        << tier;
  }
  EXPECT_GT(sum_over_sequences(c, "t1"), 0);
  EXPECT_EQ(sample(body, "kvtier_tier_bytes", {who, "tier=\"t1\""}), c["ddr_bytes_used"].get<double>());
  // Every plan the daemon sent was resolved, so each took one round trip.
  EXPECT_EQ(sample(body, "kvtier_plan_roundtrip_seconds_count", {who}),
            c["counters"]["plans_acked"].get<double>() + c["counters"]["plans_failed"].get<double>());
  EXPECT_GE(sample(body, "kvtier_moves_total", {who, "from=\"t0\"", "to=\"t1\""}), 1);
  EXPECT_EQ(sample(body, "kvtier_clients", {"state=\"open\""}), 1);

  const std::filesystem::path scraped = daemon.dir() / "scrape.txt";
  std::ofstream(scraped) << body;
  const CommandResult lint = run_command({"/bin/sh", "-c", "promtool check metrics < " + scraped.string()});
  // promtool prints nothing and exits 0 when every family follows the conventions.
  EXPECT_EQ(lint.exit_code, 0) << lint.out;
  EXPECT_EQ(lint.out, "");
}

TEST(Metrics, AnUnknownPathIsNotFound) {
  DaemonUnderTest daemon("metrics-404", {"--set", "metrics.listen=127.0.0.1:0"});
  const HostPort where = split(status(daemon)["metrics_address"]);
  httplib::Client http(where.host, where.port);
  const auto response = http.Get("/");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 404);
}

TEST(Metrics, OffByDefault) {
  DaemonUnderTest daemon("metrics-off");
  EXPECT_EQ(status(daemon)["metrics_address"], "");
}

TEST(Metrics, AnAddressInUseIsAClearStartupError) {
  DaemonUnderTest first("metrics-first", {"--set", "metrics.listen=127.0.0.1:0"});
  const std::string taken = status(first)["metrics_address"];
  const std::filesystem::path dir = first.dir() / "second";
  std::filesystem::create_directories(dir);
  ::chmod(dir.c_str(), 0700);
  const CommandResult second = run_command({KVTIER_TEST_KVTIERD, "--set", "daemon.runtime_dir=" + dir.string(), "--set",
                                            "daemon.shm_prefix=" + first.shm_prefix() + "-2", "--set",
                                            "metrics.listen=" + taken});
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(second.out.find("metrics.listen " + taken + ": cannot bind"), std::string::npos) << second.out;
}

// `program` found on $PATH (ChildProcess execs a path); empty when it is not installed.
std::string on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::filesystem::path candidate = std::filesystem::path(dir) / program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return {};
}

// The port a process listens on (TCP over IPv4), from its socket inodes and /proc/net/tcp: the
// real server picks a free port itself, so no other process can take it between pick and bind.
int listening_port(pid_t pid) {
  std::set<std::string> inodes;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);  // header
  while (std::getline(tcp, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
    if (state == "0A" && inodes.count(inode) != 0) return std::stoi(local.substr(local.find(':') + 1), nullptr, 16);
  }
  return 0;
}

TEST(Metrics, ARealPrometheusScrapesTheDaemon) {
  DaemonUnderTest daemon("metrics-prometheus", {"--set", "metrics.listen=127.0.0.1:0"});
  HeldWorkload workload(daemon, "prom");
  const Json s = status(daemon);
  const double acked = client_named(s, "prom")["counters"]["plans_acked"].get<double>();
  ASSERT_GT(acked, 0);

  const std::filesystem::path config = daemon.dir() / "prometheus.yml";
  std::ofstream(config) << "global:\n  scrape_interval: 200ms\n  scrape_timeout: 200ms\n"
                           "scrape_configs:\n  - job_name: kvtierd\n    static_configs:\n      - targets: ['"
                        << s["metrics_address"].get<std::string>() << "']\n";
  const std::string binary = on_path("prometheus");
  ASSERT_FALSE(binary.empty()) << "prometheus is not installed (scripts/install-deps installs Debian's package)";
  ChildProcess prometheus = ChildProcess::spawn(
      {binary, "--config.file=" + config.string(), "--storage.tsdb.path=" + (daemon.dir() / "tsdb").string(),
       "--web.listen-address=127.0.0.1:0"},
      daemon.dir() / "prometheus.log");
  int port = 0;
  ASSERT_TRUE(eventually([&] { return (port = listening_port(prometheus.pid())) != 0 || !prometheus.running(); },
                         std::chrono::seconds(60)) &&
              port != 0)
      << read_log(daemon.dir() / "prometheus.log");

  // The bound only ends a stuck run: Prometheus answers once it has scraped (every 200 ms).
  httplib::Client api("127.0.0.1", port);
  double seen = -1;
  const bool scraped = eventually(
      [&] {
        const auto response = api.Get("/api/v1/query?query=kvtier_plans_acked_total%7Bclient%3D%22prom%22%7D");
        if (!response || response->status != 200) return false;
        const Json answer = Json::parse(response->body);
        if (answer["data"]["result"].empty()) return false;
        seen = std::stod(answer["data"]["result"][0]["value"][1].get<std::string>());
        return true;
      },
      std::chrono::seconds(90), std::chrono::milliseconds(200));
  EXPECT_TRUE(scraped) << read_log(daemon.dir() / "prometheus.log");
  EXPECT_EQ(seen, acked);
  // Prometheus is not what this test checks: it is asked to stop, and killed by ChildProcess's
  // destructor should it still run; nothing is asserted of how it exits.
  prometheus.signal(SIGTERM);
  (void)prometheus.wait(std::chrono::seconds(30));
}

}  // namespace
}  // namespace kvtier::testing
