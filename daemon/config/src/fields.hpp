// Internal: one row per configuration key. Parsing, overrides, validation and to_toml() all walk
// this one table, so adding a key means adding a DaemonConfig field and one row in fields.cpp.
//
// Thread-safety: the table is immutable; the helpers are pure.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "kvtier/config/config.hpp"
#include "kvtier/protocol/tier_param_table.hpp"

namespace kvtier::config::detail {

// Where a key's value lives inside a DaemonConfig; the alternative is the value's type.
using FieldRef = std::variant<bool*, std::uint32_t*, std::uint64_t*, double*,
                              std::filesystem::path*, std::string*, LogLevel*, EvictionMode*>;

struct FieldSpec {
  std::string_view table;  // "limits"
  std::string_view key;    // "max_clients"
  std::string_view help;   // one line, written above the key by to_toml()
  FieldRef (*bind)(DaemonConfig&) = nullptr;
  // Integer keys: inclusive range, then an optional extra rule (e.g. power of two).
  std::uint64_t int_min = 0;
  std::uint64_t int_max = 0;
  std::string (*int_rule)(std::uint64_t) = nullptr;
  // Real keys: the interval the value must lie in (the tier parameter table's, for [tiering]).
  // NaN never fits.
  protocol::ParamRange real{};
  // Text keys (strings, paths, enum names): returns what is required, or "" when `text` fits.
  std::string (*text_rule)(std::string_view text) = nullptr;
};

// Tables in file order; every FieldSpec::table is one of them.
std::span<const std::string_view> table_names() noexcept;
// Keys in file order (grouped by table, tables in table_names() order).
std::span<const FieldSpec> field_specs() noexcept;
bool is_known_table(std::string_view table) noexcept;
// nullptr when the key does not exist.
const FieldSpec* find_field(std::string_view table, std::string_view key) noexcept;

// Read-only binding: the pointers in the result must not be written through.
FieldRef bind_read(const FieldSpec& spec, const DaemonConfig& config);

// "limits.max_clients"
std::string qualified_name(const FieldSpec& spec);

// What a candidate value violates ("must be between 1 and 65536"), or "" when it fits.
// check_int takes the signed TOML integer so that negative input is reported, not wrapped.
std::string check_int(const FieldSpec& spec, std::int64_t value);
std::string check_uint(const FieldSpec& spec, std::uint64_t value);
std::string check_real(const FieldSpec& spec, double value);
std::string check_text(const FieldSpec& spec, std::string_view value);
// Checks the value currently stored at `ref` (used by validate()).
std::string check_stored(const FieldSpec& spec, const FieldRef& ref);

// TOML literals: a basic string with escapes, a real that always reads back as a float with
// the same bits, and the stored value of any field.
std::string quote_toml(std::string_view text);
std::string format_real(double value);
std::string format_value(const FieldRef& ref);

// "invalid value for <key>: <value> (<why>)" — the shared wording of every value error.
std::string invalid_value_message(const FieldSpec& spec, std::string_view value,
                                  std::string_view why);

}  // namespace kvtier::config::detail
