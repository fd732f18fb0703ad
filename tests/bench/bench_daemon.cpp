#include "bench_daemon.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <utility>

namespace kvtier::bench {

Status check(kvtier_status s, kvtier_client* c, const char* what) {
  if (s == KVTIER_OK) return {};
  return make_error(Errc::kInternal, std::string(what) + ": " + kvtier_client_last_error(c));
}

Status BenchDaemon::connect_engine(std::uint32_t pool_tokens, kvtier_client** out) const {
  kvtier_connect_options connect;
  kvtier_connect_options_init(&connect);
  connect.socket_path = socket_.c_str();
  if (auto ok = check(kvtier_client_connect(&connect, out), nullptr, "connect"); !ok) return ok;
  kvtier_model_geometry g;
  kvtier_model_geometry_init(&g);
  g.num_layers = 1;
  g.num_kv_heads = 1;
  g.head_dim = 8;
  g.dtype = KVTIER_DTYPE_F16;
  g.pool_tokens = pool_tokens;
  return check(kvtier_model_register(*out, &g), *out, "register");
}

Result<BenchDaemon> BenchDaemon::start(const std::string& tag, const std::vector<std::string>& sets) {
  BenchDaemon d;
  char tmpl[] = "/tmp/kvtier-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return make_error(Errc::kInternal, "mkdtemp failed");
  d.dir_ = tmpl;
  d.socket_ = (d.dir_ / "kvtierd.sock").string();
  const std::string prefix = "kvtbench" + std::to_string(::getpid()) + tag;
  std::vector<std::string> args = {KVTIER_BENCH_KVTIERD_PATH, "--set", "daemon.runtime_dir=" + d.dir_.string(),
                                   "--set", "daemon.shm_prefix=" + prefix, "--set", "daemon.log_level=warn"};
  for (const std::string& set : sets) {
    args.push_back("--set");
    args.push_back(set);
  }
  d.pid_ = ::fork();
  if (d.pid_ < 0) return make_error(Errc::kInternal, "fork failed");
  if (d.pid_ == 0) {
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  for (int i = 0; i < 500 && !std::filesystem::exists(d.socket_); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!std::filesystem::exists(d.socket_)) return make_error(Errc::kInternal, "kvtierd did not start");
  return d;
}

BenchDaemon::BenchDaemon(BenchDaemon&& other) noexcept
    : dir_(std::move(other.dir_)), socket_(std::move(other.socket_)), pid_(std::exchange(other.pid_, -1)) {
  other.dir_.clear();
}

BenchDaemon::~BenchDaemon() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

}  // namespace kvtier::bench
