// The toml++ adapter: reading files, parsing, merging tables over the defaults, --set overrides.
// toml++ reports syntax errors by exception; they are caught here and become Results, and no
// exception leaves this file.
#include "kvtier/config/config.hpp"

#include <cerrno>
#include <cstdio>
#include <exception>
#include <memory>
#include <sstream>
#include <toml++/toml.h>
#include <type_traits>

#include "fields.hpp"

namespace kvtier::config {
namespace {

using detail::FieldRef;
using detail::FieldSpec;

// A configuration file is a few KiB; anything near this is a mistake (a wrong path).
constexpr std::size_t kMaxConfigFileBytes = 1 << 20;

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
// Spelled out for clang before 17, which lacks C++20's deduction guides for aggregates.
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

// " in kvtierd.toml:12" for file input, " in --set limits.max_clients=8" for overrides.
std::string where(std::string_view source, const toml::node* node) {
  std::string out = " in ";
  out += source;
  if (node != nullptr && node->source().begin.line != 0) {
    out += ':';
    out += std::to_string(node->source().begin.line);
  }
  return out;
}

std::string_view type_phrase(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    case toml::node_type::none: break;
  }
  return "nothing";
}

// The value as TOML text, for messages.
std::string literal(const toml::node& node) {
  if (const auto* text = node.as_string()) return detail::quote_toml(text->get());
  if (const auto* real = node.as_floating_point()) return detail::format_real(real->get());
  std::ostringstream out;
  node.visit([&out](const auto& value) { out << value; });
  return out.str();
}

tl::unexpected<Error> invalid(const FieldSpec& spec, const toml::node& node, std::string_view why,
                              const std::string& location) {
  return make_error(Errc::kInvalidArgument,
                    detail::invalid_value_message(spec, literal(node), why) + location);
}

tl::unexpected<Error> wrong_type(const FieldSpec& spec, const toml::node& node,
                                 std::string_view expected, const std::string& location) {
  std::string why = "expected ";
  why += expected;
  why += ", got ";
  why += type_phrase(node);
  return invalid(spec, node, why, location);
}

// Converts `node` to the field's type, checks it, and only then stores it.
Status assign(const FieldSpec& spec, DaemonConfig& config, const toml::node& node,
              const std::string& location) {
  auto assign_int = [&](auto* field) -> Status {
    const auto* integer = node.as_integer();
    if (integer == nullptr) return wrong_type(spec, node, "an integer", location);
    if (std::string why = detail::check_int(spec, integer->get()); !why.empty()) {
      return invalid(spec, node, why, location);
    }
    // check_int bounded the value by int_max, which fits the field's type.
    *field = static_cast<std::remove_pointer_t<decltype(field)>>(integer->get());
    return {};
  };
  auto text_of = [&](std::string& out) -> Status {
    const auto* text = node.as_string();
    if (text == nullptr) return wrong_type(spec, node, "a string", location);
    if (std::string why = detail::check_text(spec, text->get()); !why.empty()) {
      return invalid(spec, node, why, location);
    }
    out = text->get();
    return {};
  };
  return std::visit(
      Overloaded{
          [&](bool* field) -> Status {
            const auto* flag = node.as_boolean();
            if (flag == nullptr) return wrong_type(spec, node, "a boolean", location);
            *field = flag->get();
            return {};
          },
          [&](std::uint32_t* field) { return assign_int(field); },
          [&](std::uint64_t* field) { return assign_int(field); },
          [&](double* field) -> Status {
            double value = 0.0;
            if (const auto* real = node.as_floating_point()) {
              value = real->get();
            } else if (const auto* integer = node.as_integer()) {
              value = static_cast<double>(integer->get());  // "decay = 1" means 1.0
            } else {
              return wrong_type(spec, node, "a number", location);
            }
            if (std::string why = detail::check_real(spec, value); !why.empty()) {
              return invalid(spec, node, why, location);
            }
            *field = value;
            return {};
          },
          [&](std::filesystem::path* field) -> Status {
            std::string text;
            Status status = text_of(text);
            if (status) *field = std::move(text);
            return status;
          },
          [&](std::string* field) { return text_of(*field); },
          [&](LogLevel* field) -> Status {
            std::string text;
            Status status = text_of(text);
            if (status) *field = *parse_log_level(text);  // text_of checked the name
            return status;
          },
          [&](EvictionMode* field) -> Status {
            std::string text;
            Status status = text_of(text);
            if (status) *field = *parse_eviction_mode(text);
            return status;
          },
      },
      spec.bind(config));
}

Status merge(DaemonConfig& config, const toml::table& root, std::string_view source) {
  for (const auto& [table_key, table_node] : root) {
    const std::string_view table_name = table_key.str();
    if (!detail::is_known_table(table_name)) {
      return make_error(Errc::kInvalidArgument,
                        std::string(table_node.is_table() ? "unknown table '" : "unknown key '") +
                            std::string(table_name) + "'" + where(source, &table_node));
    }
    const auto* table = table_node.as_table();
    if (table == nullptr) {
      // Built by appends: GCC 12 -O3 reports a false -Wrestrict for "'" + std::string(...).
      std::string message = "'";
      message += table_name;
      message += "' must be a table, got ";
      message += type_phrase(table_node);
      message += where(source, &table_node);
      return make_error(Errc::kInvalidArgument, std::move(message));
    }
    for (const auto& [key, node] : *table) {
      const FieldSpec* spec = detail::find_field(table_name, key.str());
      if (spec == nullptr) {
        return make_error(Errc::kInvalidArgument, "unknown key '" + std::string(table_name) +
                                                      "." + std::string(key.str()) + "'" +
                                                      where(source, &node));
      }
      if (Status status = assign(*spec, config, node, where(source, &node)); !status) {
        return status;
      }
    }
  }
  return {};
}

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

bool is_text_field(const FieldSpec& spec) {
  DaemonConfig scratch;
  const FieldRef ref = spec.bind(scratch);
  return std::holds_alternative<std::filesystem::path*>(ref) ||
         std::holds_alternative<std::string*>(ref) || std::holds_alternative<LogLevel*>(ref) ||
         std::holds_alternative<EvictionMode*>(ref);
}

}  // namespace

Result<DaemonConfig> parse_config(std::string_view toml_text, std::string_view source_name) {
  try {
    toml::table root = toml::parse(toml_text, source_name);
    DaemonConfig config;
    if (Status status = merge(config, root, source_name); !status) {
      return tl::unexpected(status.error());
    }
    if (Status status = validate(config); !status) {
      Error error = status.error();
      error.message += where(source_name, nullptr);
      return tl::unexpected(std::move(error));
    }
    return config;
  } catch (const toml::parse_error& error) {
    const toml::source_position begin = error.source().begin;
    return make_error(Errc::kInvalidArgument,
                      "TOML syntax error in " + std::string(source_name) + ":" +
                          std::to_string(begin.line) + ":" + std::to_string(begin.column) + ": " +
                          std::string(error.description()));
  } catch (const std::exception& error) {
    return make_error(Errc::kInternal,
                      "reading " + std::string(source_name) + ": " + error.what());
  }
}

Result<DaemonConfig> load_config_file(const std::filesystem::path& path) {
  const std::string name = path.native();
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(name.c_str(), "rb"),
                                                       &std::fclose);
  if (!file) return os_error("cannot open config file '" + name + "'");
  std::string text;
  char buffer[8192];
  std::size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) {
    text.append(buffer, got);
    if (text.size() > kMaxConfigFileBytes) {
      return make_error(Errc::kInvalidArgument,
                        "config file '" + name + "' is larger than 1 MiB; wrong file?");
    }
  }
  if (std::ferror(file.get()) != 0) return os_error("cannot read config file '" + name + "'");
  return parse_config(text, name);
}

Status apply_override(DaemonConfig& config, std::string_view assignment) {
  const std::string location = " in --set " + std::string(assignment);
  const auto equals = assignment.find('=');
  const auto dot = assignment.substr(0, equals).find('.');
  if (equals == std::string_view::npos || dot == std::string_view::npos) {
    return make_error(Errc::kInvalidArgument,
                      "expected table.key=value, got '" + std::string(assignment) + "'");
  }
  const std::string_view table = trim(assignment.substr(0, dot));
  const std::string_view key = trim(assignment.substr(dot + 1, equals - dot - 1));
  const std::string_view value = trim(assignment.substr(equals + 1));
  const FieldSpec* spec = detail::find_field(table, key);
  if (spec == nullptr) {
    return make_error(Errc::kInvalidArgument, "unknown key '" + std::string(table) + "." +
                                                  std::string(key) + "'" + location);
  }
  if (value.find_first_of("\r\n") != std::string_view::npos) {
    return make_error(Errc::kInvalidArgument,
                      "invalid value for " + detail::qualified_name(*spec) +
                          ": a value is one line" + location);
  }
  // Unquoted text for a string-valued key is taken literally: --set daemon.log_level=debug.
  std::string value_toml(value);
  if (is_text_field(*spec) && (value.empty() || (value.front() != '"' && value.front() != '\''))) {
    value_toml = detail::quote_toml(value);
  }
  try {
    const std::string document = "value = " + value_toml;
    const toml::table parsed = toml::parse(document, std::string_view("--set"));
    const toml::node* node = parsed.get("value");
    if (node == nullptr || parsed.size() != 1) {
      return make_error(Errc::kInvalidArgument, "invalid value for " +
                                                    detail::qualified_name(*spec) + ": " +
                                                    std::string(value) + location);
    }
    DaemonConfig candidate = config;  // leave `config` untouched on error
    if (Status status = assign(*spec, candidate, *node, location); !status) return status;
    config = std::move(candidate);
    return {};
  } catch (const toml::parse_error& error) {
    return make_error(Errc::kInvalidArgument,
                      "invalid value for " + detail::qualified_name(*spec) + ": " +
                          std::string(value) + " (not a TOML value: " +
                          std::string(error.description()) + ")" + location);
  } catch (const std::exception& error) {
    return make_error(Errc::kInternal, "applying --set " + std::string(assignment) + ": " +
                                           error.what());
  }
}

}  // namespace kvtier::config
