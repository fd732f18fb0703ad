// What kvtierctl's commands share: JSON output, error reporting and exit codes, connecting with
// the admin role, argument parsing. Uses only the public client API. Thread-safety: one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "kvtier/kvtier.hpp"

namespace kvtier::cli {

// Keys in the order written, as docs/kvtierctl-json.md lists them.
using Json = nlohmann::ordered_json;

// Compact, one line. Every string the daemon sent is untrusted: non-ASCII (DEL and C1 included)
// and control characters are escaped (\uXXXX), bytes that are not UTF-8 become U+FFFD, so the
// text is valid JSON and nothing in it acts on a terminal.
void print_json(const Json& document);

int exit_code_for(kvtier_status status);
// Prints "kvtierctl: <status>: <why>" (escaped) to stderr; returns the exit code for `status`.
int report(kvtier_status status, const Client& client);
// Prints "kvtierctl <command>: <message>" to stderr; returns kExitUsage.
int usage_error(std::string_view command, const std::string& message);

// Connects as "kvtierctl" with the admin role.
kvtier_status connect_admin(const GlobalOptions& options, Client& client);

// A decimal unsigned 32-bit number, nothing else; nullopt otherwise.
std::optional<std::uint32_t> parse_u32(std::string_view text);

unsigned long long ull(std::uint64_t v);
const char* backpressure_name(kvtier_backpressure reason);
// "t0".."t3" (the --json names); "?" otherwise.
const char* tier_name(kvtier_tier tier);

// Columns and rows of the terminal on stdout; 0 when stdout is not a terminal.
struct TerminalSize {
  unsigned columns = 0, rows = 0;
};
TerminalSize terminal_size();

}  // namespace kvtier::cli
