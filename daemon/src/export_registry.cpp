#include "export_registry.hpp"

#include <sys/random.h>

namespace kvtier::daemon {

std::uint64_t ExportRegistry::add(Entry entry) {
  std::uint64_t token = 0;
  while (token == 0 || entries_.contains(token)) {
    if (::getrandom(&token, sizeof(token), 0) != static_cast<ssize_t>(sizeof(token))) token = 0;
  }
  entries_.emplace(token, std::move(entry));
  return token;
}

ExportRegistry::Entry* ExportRegistry::find(std::uint64_t token) {
  auto it = entries_.find(token);
  return it == entries_.end() ? nullptr : &it->second;
}

std::optional<std::uint64_t> ExportRegistry::token_of(std::uint32_t exporter, std::uint32_t sequence) const {
  for (const auto& [token, entry] : entries_) {
    if (entry.exporter == exporter && entry.sequence == sequence) return token;
  }
  return std::nullopt;
}

std::optional<std::uint32_t> ExportRegistry::adopter_of(std::uint32_t exporter, std::uint32_t sequence) const {
  for (const auto& [token, entry] : entries_) {
    if (entry.exporter == exporter && entry.sequence == sequence && entry.state == State::kAdopting) return entry.adopter;
  }
  return std::nullopt;
}

void ExportRegistry::drop_waiting(std::uint32_t exporter) {
  std::erase_if(entries_, [exporter](const auto& item) {
    return item.second.exporter == exporter && item.second.state == State::kWaiting;
  });
}

}  // namespace kvtier::daemon
