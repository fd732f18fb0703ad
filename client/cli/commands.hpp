// kvtierctl commands: one function per command, registered in a table. They use only the public
// client API (kvtier.hpp). Exit codes are part of the CLI's contract.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace kvtier::cli {

enum ExitCode : int { kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitUnreachable = 3, kExitVersionMismatch = 4 };

struct GlobalOptions {
  std::string socket_path;  // empty: $KVTIER_SOCKET or the default
  bool json = false;
};

struct Command {
  std::string_view name;
  std::string_view summary;
  int (*run)(const GlobalOptions& options);
};

std::span<const Command> commands();

}  // namespace kvtier::cli
