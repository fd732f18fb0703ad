// kvtierctl: admin CLI for kvtierd. Usage: kvtierctl [--socket PATH] [--json] <command> [ARGS].
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "commands.hpp"

namespace {

int usage(FILE* out, int code) {
  std::fputs("usage: kvtierctl [--socket PATH] [--json] <command> [arguments]\n"
             "  --socket PATH  daemon socket (default: $KVTIER_SOCKET or /run/kvtier/kvtierd.sock)\n"
             "  --json         machine-readable output (docs/kvtierctl-json.md; not for top)\n"
             "  (both may also follow the command)\n"
             "commands:\n",
             out);
  for (const auto& command : kvtier::cli::commands()) {
    std::fprintf(out, "  %-8s %.*s\n", command.name.data(), static_cast<int>(command.arguments.size()),
                 command.arguments.data());
    std::fprintf(out, "           %.*s\n", static_cast<int>(command.summary.size()), command.summary.data());
  }
  std::fputs("exit codes: 0 ok, 1 failed, 2 usage, 3 daemon unreachable, 4 version mismatch\n", out);
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  kvtier::cli::GlobalOptions options;
  std::string_view command_name;
  std::vector<std::string_view> args;  // after the command word: the command checks them
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--json") {
      options.json = true;
    } else if (arg == "--socket") {
      if (++i >= argc) {
        std::fputs("kvtierctl: --socket needs a path\n", stderr);
        return usage(stderr, kvtier::cli::kExitUsage);
      }
      options.socket_path = argv[i];
    } else if (arg == "--help" || arg == "-h") {
      return usage(stdout, kvtier::cli::kExitOk);
    } else if (!command_name.empty()) {
      args.push_back(arg);
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr, "kvtierctl: unknown option '%s'\n", argv[i]);
      return usage(stderr, kvtier::cli::kExitUsage);
    } else {
      command_name = arg;
    }
  }
  if (command_name.empty()) return usage(stderr, kvtier::cli::kExitUsage);
  for (const auto& command : kvtier::cli::commands()) {
    if (command.name == command_name) return command.run(options, args);
  }
  std::fprintf(stderr, "kvtierctl: unknown command '%.*s'\n", static_cast<int>(command_name.size()), command_name.data());
  return usage(stderr, kvtier::cli::kExitUsage);
}
