// Session's hand-off requests (handoff.hpp, PROTOCOL.md "Sequence hand-off"): ExportSequence and
// AdoptSequence, and the close rule for exported sequences.
#include <fcntl.h>

#include <string>

#include "handoff_checks.hpp"
#include "request_checks.hpp"
#include "server.hpp"
#include "session.hpp"
#include "tier_params.hpp"

namespace kvtier::daemon {
namespace {

bool carries_fd(wire::BufferKind kind) {
  return kind == wire::BufferKind::HOST_FD || kind == wire::BufferKind::CUDA_VMM_FD;
}

}  // namespace

Status Session::on_export(wire::ExportSequence::Reader request) {
  if (!geometry_) return make_error(Errc::kBadState, "ExportSequence before RegisterModel");
  auto cache = request.getCache();
  // The fd came with this frame: take it before any check, so a refused export does not leave
  // it behind for the next one.
  UniqueFd fd;
  if (carries_fd(cache.getKind())) {
    if (received_fds_.empty()) {
      return make_error(Errc::kProtocol, "ExportSequence of a hostFd or cudaVmmFd buffer must carry its fd (SCM_RIGHTS)");
    }
    fd = std::move(received_fds_.front());
    received_fds_.pop_front();
  }
  const std::uint32_t id = request.getSequenceId();
  if (!sequences_.contains(id)) return make_error(Errc::kNotFound, "no open sequence " + std::to_string(id));
  if (server_.exports().token_of(client_id_, id)) {
    return make_error(Errc::kBadState, "sequence " + std::to_string(id) + " is already exported");
  }
  // Registered, so the dtype is known.
  const kernels::KvDtype dtype = kernel_dtype(dtype_).value_or(kernels::KvDtype::kF16);
  if (auto ok = check_exported_cache(cache, *geometry_, dtype); !ok) return ok;
  auto t0 = t0_list_from_wire(request.getT0Positions(), request.getT0Slots(), cache.getNumSlots());
  if (!t0) return tl::unexpected(t0.error());
  ExportRegistry::Entry entry;
  entry.exporter = client_id_;
  entry.exporter_pid = static_cast<std::uint32_t>(peer_.pid);
  entry.exporter_uid = static_cast<std::uint32_t>(peer_.uid);
  entry.sequence = id;
  entry.num_layers = geometry_->num_layers;
  entry.num_kv_heads = geometry_->num_kv_heads;
  entry.head_dim = geometry_->head_dim;
  entry.dtype = dtype_;
  entry.cache = std::make_shared<capnp::MallocMessageBuilder>();
  entry.cache->setRoot(cache);
  entry.fd = std::make_shared<UniqueFd>(std::move(fd));
  server_.data_plane().export_sequence(
      client_id_, id, std::move(*t0), [self = shared_from_this(), id, entry = std::move(entry)](Status frozen) {
        if (self->state_ == State::kClosed) return;
        if (!frozen) return self->send_error(frozen.error());
        const std::uint64_t token = self->server_.exports().add(entry);
        capnp::MallocMessageBuilder reply;
        auto exported = reply.initRoot<wire::DaemonMessage>().initSequenceExported();
        exported.setSequenceId(id);
        exported.setHandoffToken(token);
        self->send(reply);
      });
  return {};
}

Status Session::on_adopt(wire::AdoptSequence::Reader request) {
  if (!geometry_) return make_error(Errc::kBadState, "AdoptSequence before RegisterModel");
  const std::uint64_t token = request.getHandoffToken();
  ExportRegistry::Entry* entry = server_.exports().find(token);
  if (entry == nullptr || entry->state != ExportRegistry::State::kWaiting) {
    return make_error(Errc::kNotFound, "no sequence is waiting for an adopter under this hand-off token (unknown, "
                                       "being adopted, or closed by its exporter)");
  }
  if (entry->exporter == client_id_) return make_error(Errc::kInvalidArgument, "a client cannot adopt its own sequence");
  if (peer_.uid != entry->exporter_uid && peer_.uid != 0) {
    // The adopter maps the exporter's KV: the same user only (or root), whoever holds the token.
    return make_error(Errc::kPermissionDenied, "uid " + std::to_string(peer_.uid) +
                                                   " may not adopt a sequence exported by uid " +
                                                   std::to_string(entry->exporter_uid));
  }
  if (auto ok = check_adopter_geometry(*geometry_, dtype_, *entry); !ok) return ok;
  const auto& limits = server_.config().limits;
  if (sequences_.size() >= limits.max_sequences_per_client) {
    return make_error(Errc::kLimitExceeded, "client has " + std::to_string(sequences_.size()) +
                                                " sequences open, limit limits.max_sequences_per_client=" +
                                                std::to_string(limits.max_sequences_per_client));
  }
  const std::uint32_t id = next_sequence_++;
  sequences_.insert(id);
  entry->state = ExportRegistry::State::kAdopting;
  entry->adopter = client_id_;
  const HandoffOrigin origin{token, entry->exporter, entry->sequence};
  server_.data_plane().adopt(
      origin, client_id_, id,
      [self = shared_from_this(), id, token, pid = entry->exporter_pid, cache = entry->cache,
       fd = entry->fd](Result<AdoptedSequence> adopted) {
        if (!adopted) {
          if (ExportRegistry::Entry* e = self->server_.exports().find(token)) e->state = ExportRegistry::State::kWaiting;
          self->sequences_.erase(id);
          if (self->state_ != State::kClosed) self->send_error(adopted.error());
          return;
        }
        if (self->state_ == State::kClosed) return;  // the data plane fails the hand-off on detach
        std::vector<UniqueFd> fds;
        if (*fd) {
          UniqueFd copy(::fcntl(fd->get(), F_DUPFD_CLOEXEC, 0));
          if (!copy) {
            self->server_.log().error("event=handoff_fd_dup_failed client_id={} errno={}", self->client_id_, errno);
            return self->close();  // the hand-off fails when the data plane sees the client gone
          }
          fds.push_back(std::move(copy));
        }
        capnp::MallocMessageBuilder reply;
        auto out = reply.initRoot<wire::DaemonMessage>().initSequenceAdopted();
        out.setSequenceId(id);
        out.setPromptLength(adopted->prompt_length);
        out.setPositions(adopted->positions);
        out.setExporterPid(pid);
        out.setKeyDigestDim(adopted->digest_dim);
        out.setPolicy(to_wire(adopted->policy));
        set_shipping(out.initShipping(), adopted->params, adopted->steps_done);
        out.setCache(cache->getRoot<wire::ExportedCache>().asReader());
        self->send(reply, std::move(fds));
      });
  return {};
}

bool Session::close_after_handoff_settles(std::uint32_t id) {
  const auto adopter = server_.exports().adopter_of(client_id_, id);
  if (!adopter) return false;
  server_.data_plane().service_client(*adopter, [self = shared_from_this(), id] {
    if (self->state_ == State::kClosed) return;
    if (auto ok = self->close_sequence(id); !ok) self->send_error(ok.error());
  });
  return true;
}

Status Session::cancel_export(std::uint32_t id) {
  const auto token = server_.exports().token_of(client_id_, id);
  if (!token) return {};
  if (server_.exports().find(*token)->state == ExportRegistry::State::kAdopting) {
    return make_error(Errc::kBadState, "sequence " + std::to_string(id) +
                                           " is being adopted; close it once the adopter acknowledged the hand-off");
  }
  server_.exports().erase(*token);
  return {};
}

}  // namespace kvtier::daemon
