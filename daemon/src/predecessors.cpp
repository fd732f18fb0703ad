#include "predecessors.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <vector>

namespace kvtier::daemon {
namespace {

constexpr const char* kShmDirectory = "/dev/shm";  // where Linux keeps POSIX shm objects

// The epoch an entry of /dev/shm names under `stem` ("kvtier.<prefix>-"), if it is one of ours.
std::optional<std::uint64_t> epoch_in(const std::string& entry, const std::string& stem) {
  if (entry.compare(0, stem.size(), stem) != 0 || entry.size() < stem.size() + 17) return std::nullopt;
  if (entry[stem.size() + 16] != '.') return std::nullopt;
  std::uint64_t epoch = 0;
  for (std::size_t i = stem.size(); i < stem.size() + 16; ++i) {
    const char c = entry[i];
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return std::nullopt;
    epoch = (epoch << 4) | static_cast<std::uint64_t>(digit);
  }
  return epoch;
}

bool process_gone(std::uint32_t pid) { return pid == 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH); }

}  // namespace

Result<std::string> Predecessors::name_of(const std::string& shm_prefix, std::uint64_t epoch, std::uint32_t client_id,
                                          shm::SegmentKind kind) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016" PRIx64, epoch);
  return shm::segment_name(shm_prefix + "-" + hex, client_id, kind);
}

Predecessors::Predecessors(std::string shm_prefix, std::uint64_t own_epoch, spdlog::logger& log,
                           std::function<void(const std::string&)> on_dropped)
    : prefix_(std::move(shm_prefix)),
      own_epoch_(own_epoch),
      log_(log),
      on_dropped_(std::move(on_dropped)),
      started_(std::chrono::steady_clock::now()) {}

std::size_t Predecessors::scan(std::vector<std::pair<std::string, UniqueFd>> stored) {
  const std::string stem = "kvtier." + prefix_ + "-";
  std::vector<std::string> names;
  if (DIR* dir = ::opendir(kShmDirectory)) {
    while (const dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (auto epoch = epoch_in(name, stem); epoch && *epoch != own_epoch_) names.push_back("/" + name);
    }
    ::closedir(dir);
  }
  for (std::string& name : names) {
    auto segment = shm::Segment::open_existing(name);
    if (!segment) {
      // Not a segment this build can adopt (another layout, half-written): its name goes.
      ::shm_unlink(name.c_str());
      log_.warn("event=stale_segment_removed name={} reason=\"{}\"", name, segment.error().message);
      continue;
    }
    auto expected = name_of(prefix_, segment->epoch(), segment->client_id(), segment->kind());
    if (!expected || *expected != name || segment->kind() == shm::SegmentKind::kControl) {
      log_.info("event=stale_segment_removed name={} kind={} reason=\"{}\"", name,
                static_cast<std::uint32_t>(segment->kind()),
                segment->kind() == shm::SegmentKind::kControl ? "control segments are not adopted"
                                                              : "header does not match the name");
      continue;  // the Segment unlinks the name as it goes
    }
    log_.info("event=orphan_found name={} epoch={:016x} client_id={} owner_pid={} owner_uid={} bytes={}", name,
              segment->epoch(), segment->client_id(), segment->owner().pid, segment->owner().uid, segment->size());
    orphans_.emplace(std::move(name), std::move(*segment));
  }
  for (auto& [fdname, fd] : stored) {
    const std::string name = "/" + fdname;
    if (orphans_.contains(name)) continue;  // found by its name as well; the store keeps its copy
    const auto epoch = epoch_in(fdname, stem);
    auto segment = epoch && *epoch != own_epoch_ ? shm::Segment::from_fd(std::move(fd), name)
                                                 : Result<shm::Segment>(make_error(Errc::kNotFound, "not ours"));
    std::optional<std::string> expected;
    if (segment) expected = name_of(prefix_, segment->epoch(), segment->client_id(), segment->kind()).value_or("");
    if (!segment || expected != name || segment->kind() == shm::SegmentKind::kControl) {
      log_.info("event=stored_fd_dropped name={} reason=\"{}\"", fdname,
                segment ? "not an adoptable pool of this prefix" : segment.error().message);
      if (on_dropped_) on_dropped_(name);
      continue;
    }
    log_.info("event=orphan_found name={} by=fd_store epoch={:016x} client_id={} owner_pid={} bytes={}", name,
              segment->epoch(), segment->client_id(), segment->owner().pid, segment->size());
    orphans_.emplace(name, std::move(*segment));
  }
  return orphans_.size();
}

const shm::Segment* Predecessors::find(const std::string& name) const {
  auto it = orphans_.find(name);
  return it == orphans_.end() ? nullptr : &it->second;
}

shm::Segment Predecessors::adopt(const std::string& name) {
  auto node = orphans_.extract(name);
  return std::move(node.mapped());
}

void Predecessors::sweep(std::chrono::milliseconds grace) {
  if (std::chrono::steady_clock::now() - started_ < grace) return;
  std::erase_if(orphans_, [this](const auto& entry) {
    const shm::SegmentOwner owner = entry.second.owner();
    if (!process_gone(owner.pid)) return false;
    log_.info("event=orphan_removed name={} owner_pid={} bytes={} reason=\"its process has exited\"", entry.first,
              owner.pid, entry.second.size());
    if (on_dropped_) on_dropped_(entry.first);
    return true;
  });
}

void Predecessors::keep_names() {
  for (auto& [name, segment] : orphans_) segment.release_name();
}

}  // namespace kvtier::daemon
