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

// A command's run gets the arguments after the command word that are not global options
// (positional arguments and its own options), in order, and checks them itself (kExitUsage).
using CommandFn = int (*)(const GlobalOptions& options, std::span<const std::string_view> args);

struct Command {
  std::string_view name;
  std::string_view arguments;  // for the usage text, e.g. "[N]"
  std::string_view summary;
  CommandFn run;
};

std::span<const Command> commands();

// Commands in their own files.
int run_events(const GlobalOptions& options, std::span<const std::string_view> args);    // events.cpp
int run_sequence(const GlobalOptions& options, std::span<const std::string_view> args);  // sequence_strip.cpp
int run_top(const GlobalOptions& options, std::span<const std::string_view> args);       // top.cpp

}  // namespace kvtier::cli
