// The names a client sends (Hello.clientName, RegisterModel.modelName). kvtierd writes them into
// its log and `kvtierctl status` shows them, so they are untrusted input that reaches a terminal
// and a JSON document: the daemon accepts printable text only and refuses the rest at the door
// (PROTOCOL.md §4 "Names"). Clients may run the same check before sending.
// Thread-safety: constants and pure functions only.
#pragma once

#include <cstddef>
#include <string_view>

#include "kvtier/base/error.hpp"

namespace kvtier::protocol {

// Longest name in bytes: kvtier_client_info.name and .model_name hold 63 bytes and the NUL.
inline constexpr std::size_t kMaxNameBytes = 63;

// {} when `name` is at most kMaxNameBytes bytes of well-formed UTF-8 (shortest form, no
// surrogates, nothing above U+10FFFF) holding no control character: C0 (U+0000..U+001F, NUL
// included), DEL (U+007F) or C1 (U+0080..U+009F). Otherwise kInvalidArgument naming `field`,
// the first offending byte's offset and value, and the rule; the message never repeats the
// name's bytes, so it is safe to log and to send back.
Status check_name(std::string_view field, std::string_view name);

}  // namespace kvtier::protocol
