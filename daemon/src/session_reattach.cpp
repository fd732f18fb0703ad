// Session::on_reattach: an engine whose pools a predecessor created takes them back
// (PROTOCOL.md §4 "Reattachment"; DESIGN.md invariant 7).
#include <algorithm>
#include <string>
#include <vector>

#include "kvtier/protocol/names.hpp"
#include "reattach_checks.hpp"
#include "request_checks.hpp"
#include "server.hpp"
#include "session.hpp"
#include "tier_params.hpp"

namespace kvtier::daemon {

Status Session::on_reattach(wire::Reattach::Reader request) {
  // The fds came with this frame: take them before any check, so a refusal leaves none behind.
  auto model = request.getModel();
  const std::size_t carried = std::min<std::size_t>(received_fds_.size(), model.getInt8PoolTokens() != 0 ? 2 : 1);
  std::vector<UniqueFd> fds;
  for (std::size_t i = 0; i < carried; ++i) {
    fds.push_back(std::move(received_fds_.front()));
    received_fds_.pop_front();
  }
  if (!is_engine()) return make_error(Errc::kPermissionDenied, "Reattach needs the engine role");
  if (geometry_) return make_error(Errc::kBadState, "Reattach after RegisterModel");
  const std::string_view model_name(model.getModelName().begin(), model.getModelName().size());
  if (auto ok = protocol::check_name("Reattach.model.modelName", model_name); !ok) return ok;
  auto pool = pool_request_from_wire(model, server_.config().pools);
  if (!pool) return tl::unexpected(pool.error());
  auto sequences = restore_sequences(request, *pool, server_.config(), client_id_);
  if (!sequences) return tl::unexpected(sequences.error());
  std::vector<std::uint32_t> ids;
  std::vector<tier::TierParams> params;  // in the request's order: Reattached.shipping
  std::uint64_t rows = 0;
  for (const RestoredSequence& s : *sequences) {
    ids.push_back(s.sequence_id);
    params.push_back(s.tiers.params());
    rows += s.rows();
  }
  const std::uint32_t count = static_cast<std::uint32_t>(ids.size());
  auto adopted = server_.reattach(
      *this, *pool, request.getPreviousEpoch(), request.getPreviousClientId(), fds, std::move(*sequences),
      [self = shared_from_this(), pool = *pool, count, rows, params = std::move(params)](Status restored) {
        if (self->state_ == State::kClosed) return;
        if (!restored) return self->fail(restored.error());
        capnp::MallocMessageBuilder reply;
        auto done = reply.initRoot<wire::DaemonMessage>().initReattached();
        done.setPoolSlots(pool.ddr.slots);
        done.setInt8Slots(pool.int8 ? pool.int8->slots() : 0);
        done.setWeight(pool.weight);
        done.setSequences(count);
        done.setRowsAdopted(rows);
        auto shipping = done.initShipping(static_cast<unsigned>(params.size()));
        for (unsigned i = 0; i < params.size(); ++i) set_shipping(shipping[i], params[i], 0);  // steps restart
        self->send(reply);
      });
  if (!adopted) return adopted;
  // The session is registered from here on, whatever the data plane answers.
  geometry_ = pool->ddr;
  int8_slots_ = pool->int8 ? pool->int8->slots() : 0;
  dtype_ = model.getDtype();
  model_name_ = std::string(model_name);
  sequences_.insert(ids.begin(), ids.end());
  if (!ids.empty()) next_sequence_ = *std::max_element(ids.begin(), ids.end()) + 1;
  return {};
}

}  // namespace kvtier::daemon
