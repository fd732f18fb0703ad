// Server::reattach: a client's claim on the pools a predecessor made for it (PROTOCOL.md §4
// "Reattachment"), checked against the orphans, then handed to the data plane.
#include <sys/stat.h>

#include "kvtier/shm/int8_pool_segment.hpp"
#include "kvtier/shm/pool_segment.hpp"
#include "server.hpp"
#include "session.hpp"

namespace kvtier::daemon {

Result<std::string> Server::check_claim(std::uint64_t previous_epoch, std::uint32_t previous_client,
                                        shm::SegmentKind kind, int fd, std::uint32_t uid) const {
  auto name = Predecessors::name_of(config_.daemon.shm_prefix, previous_epoch, previous_client, kind);
  if (!name) return tl::unexpected(name.error());
  const shm::Segment* orphan = predecessors_.find(*name);
  if (orphan == nullptr) {
    return make_error(Errc::kNotFound, "no segment " + *name +
                                           " waits for its client (never created, reattached already, or removed "
                                           "after its process exited)");
  }
  struct stat sent{}, held{};
  if (fd < 0 || ::fstat(fd, &sent) != 0 || ::fstat(orphan->fd(), &held) != 0 || sent.st_dev != held.st_dev ||
      sent.st_ino != held.st_ino) {
    return make_error(Errc::kPermissionDenied, "the fd sent for " + *name + " is not that segment");
  }
  if (orphan->owner().uid != uid) {
    return make_error(Errc::kPermissionDenied, *name + " belongs to uid " + std::to_string(orphan->owner().uid) +
                                                   ", not " + std::to_string(uid));
  }
  return name;
}

Status Server::reattach(Session& session, const PoolRequest& request, std::uint64_t previous_epoch,
                        std::uint32_t previous_client, std::span<const UniqueFd> fds,
                        std::vector<RestoredSequence> sequences, std::function<void(Status)> done) {
  if (previous_epoch == epoch_) {
    return make_error(Errc::kBadState, "epoch " + std::to_string(previous_epoch) +
                                           " is this daemon's own: a client reattaches only to a successor of "
                                           "the daemon that created its pools");
  }
  const std::size_t expected = request.int8 ? 2 : 1;
  if (fds.size() != expected) {
    return make_error(Errc::kInvalidArgument, "Reattach carries " + std::to_string(fds.size()) + " fds, needs " +
                                                  std::to_string(expected) + " (the pool's, then the int8 pool's)");
  }
  const std::uint32_t id = session.client_id();
  ClientRecord& record = clients_.at(id);
  const auto uid = static_cast<std::uint32_t>(record.peer.uid);
  auto ddr_name = check_claim(previous_epoch, previous_client, shm::SegmentKind::kPool, fds[0].get(), uid);
  if (!ddr_name) return tl::unexpected(ddr_name.error());
  std::optional<std::string> int8_name;
  if (request.int8) {
    auto claimed = check_claim(previous_epoch, previous_client, shm::SegmentKind::kInt8Pool, fds[1].get(), uid);
    if (!claimed) return tl::unexpected(claimed.error());
    int8_name = *claimed;
  }
  // The segments' own blocks must be what the client registers now.
  auto view = shm::PoolView::validate(predecessors_.find(*ddr_name)->bytes());
  if (!view) return tl::unexpected(view.error());
  if (!(view->geometry() == request.ddr)) {
    return make_error(Errc::kInvalidArgument, *ddr_name + " holds " + std::to_string(view->geometry().slots) +
                                                  " slots of another geometry than the Reattach registers");
  }
  if (int8_name) {
    auto int8_view = shm::Int8PoolView::validate(predecessors_.find(*int8_name)->bytes());
    if (!int8_view) return tl::unexpected(int8_view.error());
    if (!(int8_view->geometry() == *request.int8)) {
      return make_error(Errc::kInvalidArgument, *int8_name + " holds another int8 geometry than the Reattach "
                                                             "registers (pools.int8_group_tokens changed?)");
    }
  }
  if (auto ok = check_pool_limits(request); !ok) return ok;

  record.pool_names.push_back(*ddr_name);
  if (int8_name) record.pool_names.push_back(*int8_name);
  shm::Segment ddr = predecessors_.adopt(*ddr_name);
  std::optional<Int8Pool> int8;
  if (int8_name) int8.emplace(Int8Pool{predecessors_.adopt(*int8_name), *request.int8});
  record.pool_bytes = ddr.size() + (int8 ? int8->segment.size() : 0);
  record.int8_bytes = int8 ? int8->segment.size() : 0;
  record.weight = request.weight;
  pool_bytes_used_ += record.pool_bytes;
  int8_bytes_used_ += record.int8_bytes;
  ++reattachments_;
  std::uint64_t rows = 0;
  for (const RestoredSequence& sequence : sequences) rows += sequence.rows();
  log_.info("event=client_reattached client_id={} pid={} previous_epoch={:016x} previous_client_id={} sequences={} "
            "rows={} pool_bytes={}",
            id, record.peer.pid, previous_epoch, previous_client, sequences.size(), rows, record.pool_bytes);
  data_plane_.restore(id, PoolSetup{std::move(ddr), request.ddr, std::move(int8), request.dtype, request.weight},
                      std::move(sequences), std::move(done));
  report_status();
  return {};
}

}  // namespace kvtier::daemon
