// BenchDaemon: a real kvtierd for the benchmarks that drive one (node_scale, plan_window): a
// child process with its own runtime directory and shm prefix, started with `--set` overrides;
// SIGTERMed, reaped and its directory removed by the destructor.
//
// Thread-safety: one owner; the object only holds the child's pid and paths.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kvtier/kvtier.h"
#include "kvtier/base/error.hpp"

namespace kvtier::bench {

// kInternal naming `what` and the client's last error when s is not KVTIER_OK (c may be null).
Status check(kvtier_status s, kvtier_client* c, const char* what);

class BenchDaemon {
 public:
  // `tag` makes the shm prefix unique within this process; `sets` are extra KEY=VALUE overrides
  // on top of the runtime directory, prefix and log level. kInternal when it did not start
  // listening within 10 s.
  static Result<BenchDaemon> start(const std::string& tag, const std::vector<std::string>& sets);
  BenchDaemon(BenchDaemon&& other) noexcept;
  BenchDaemon& operator=(BenchDaemon&&) = delete;
  ~BenchDaemon();

  pid_t pid() const { return pid_; }
  const std::string& socket() const { return socket_; }

  // An engine client of this daemon (*out, freed by the caller, also on error) registered with the
  // benchmarks' one-layer geometry (one KV head of 8 f16) and a pool of pool_tokens rows.
  Status connect_engine(std::uint32_t pool_tokens, kvtier_client** out) const;

 private:
  BenchDaemon() = default;
  std::filesystem::path dir_;
  std::string socket_;
  pid_t pid_ = -1;
};

}  // namespace kvtier::bench
