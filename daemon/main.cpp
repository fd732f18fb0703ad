// kvtierd: builds the configuration and the logger, then runs the daemon (daemon/src/daemon.hpp).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/sinks/systemd_sink.h>
#include <spdlog/spdlog.h>

#include "daemon.hpp"
#include "kvtier/config/config.hpp"

namespace {

constexpr const char* kUsage =
    "usage: kvtierd [--config FILE] [--set table.key=value]... [--socket PATH] [--print-config] [--version]\n"
    "  --config FILE       TOML configuration (default: built-in defaults)\n"
    "  --set K=V           override one key, e.g. --set limits.max_clients=8\n"
    "  --socket PATH       shortcut for --set daemon.socket=PATH\n"
    "  --print-config      print the effective configuration and exit\n";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "kvtierd: %s\n%s", message.c_str(), kUsage);
  return 2;
}

std::shared_ptr<spdlog::logger> make_logger(kvtier::config::LogLevel level) {
  std::shared_ptr<spdlog::logger> log;
  if (std::getenv("JOURNAL_STREAM") != nullptr) {  // journald adds time and unit
    log = std::make_shared<spdlog::logger>("kvtierd", std::make_shared<spdlog::sinks::systemd_sink_mt>());
  } else {
    log = std::make_shared<spdlog::logger>("kvtierd", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    log->set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %n: %v");
  }
  log->set_level(static_cast<spdlog::level::level_enum>(level));
  log->flush_on(spdlog::level::info);
  return log;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_file;
  std::vector<std::string> overrides;
  bool print_config = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&](std::string_view flag) -> const char* {
      if (i + 1 >= argc) return nullptr;
      (void)flag;
      return argv[++i];
    };
    if (arg == "--config") {
      const char* v = value(arg);
      if (v == nullptr) return usage_error("--config needs a file");
      config_file = v;
    } else if (arg == "--set") {
      const char* v = value(arg);
      if (v == nullptr) return usage_error("--set needs table.key=value");
      overrides.emplace_back(v);
    } else if (arg == "--socket") {
      const char* v = value(arg);
      if (v == nullptr) return usage_error("--socket needs a path");
      overrides.push_back(std::string("daemon.socket=\"") + v + "\"");
    } else if (arg == "--print-config") {
      print_config = true;
    } else if (arg == "--version") {
      std::printf("kvtierd %s\n", KVTIER_VERSION);
      return 0;
    } else if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      return usage_error("unknown argument '" + std::string(arg) + "'");
    }
  }

  kvtier::Result<kvtier::config::DaemonConfig> config =
      config_file.empty() ? kvtier::Result<kvtier::config::DaemonConfig>(kvtier::config::DaemonConfig{})
                          : kvtier::config::load_config_file(config_file);
  if (!config) {
    std::fprintf(stderr, "kvtierd: %s\n", kvtier::to_string(config.error()).c_str());
    return 1;
  }
  for (const auto& assignment : overrides) {
    if (auto ok = kvtier::config::apply_override(*config, assignment); !ok) {
      std::fprintf(stderr, "kvtierd: %s\n", ok.error().message.c_str());
      return 2;
    }
  }
  if (auto ok = kvtier::config::validate(*config); !ok) {
    std::fprintf(stderr, "kvtierd: %s\n", kvtier::to_string(ok.error()).c_str());
    return 1;
  }
  if (print_config) {
    std::fputs(kvtier::config::to_toml(*config).c_str(), stdout);
    return 0;
  }
  auto log = make_logger(config->daemon.log_level);
  return kvtier::daemon::run_daemon(*config, *log) ? 0 : 1;
}
