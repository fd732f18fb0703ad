// Text from kvtierd (client and model names, versions, error messages) made safe to print.
// kvtierd refuses control characters and ill-formed UTF-8 in the names it accepts
// (protocol/PROTOCOL.md §4 "Names"), but kvtierctl does not rely on that: an older or broken
// daemon must not be able to move the cursor, forge output lines or break --json.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvtier::cli {

// `text` for a terminal: a backslash as "\\", C0 and DEL as "\x1b", C1 as "\u0085", a byte
// that is not well-formed UTF-8 as "\xff"; everything else as it is.
std::string printable(std::string_view text);

}  // namespace kvtier::cli
