#include "data_plane.hpp"

#include <asio/post.hpp>

#include "client_channel.hpp"

namespace kvtier::daemon {

DataPlane::DataPlane(asio::io_context& control_io, const config::DaemonConfig& config, spdlog::logger& log)
    : control_io_(control_io),
      config_(config),
      log_(log),
      work_(asio::make_work_guard(io_)),
      budget_(config.pools, [this](std::uint32_t client_id) {
        // A client asked to give rows back is serviced on its own turn, never inside another
        // client's decision; it may be gone by then.
        post([this, client_id] {
          if (auto it = channels_.find(client_id); it != channels_.end()) it->second->service();
        });
      }) {}

DataPlane::~DataPlane() { stop(); }

void DataPlane::start(FailHandler on_fail, EventHandler on_event) {
  on_fail_ = std::move(on_fail);
  on_event_ = std::move(on_event);
  thread_ = std::jthread([this] { io_.run(); });
}

void DataPlane::stop() {
  if (!thread_.joinable()) return;
  asio::post(io_, [this] {
    drain_timer_.reset();
    channels_.clear();
  });
  work_.reset();
  thread_.join();
}

template <class Fn>
void DataPlane::post(Fn&& fn) {
  // Handlers may own move-only resources (segments, fds); asio copies nothing.
  asio::post(io_, std::forward<Fn>(fn));
}

void DataPlane::report_failure(std::uint32_t client_id, const Error& error) {
  asio::post(control_io_, [this, client_id, error] { on_fail_(client_id, error); });
}

void DataPlane::report_event(Event event) {
  if (!on_event_) return;
  asio::post(control_io_, [this, event = std::move(event)]() mutable { on_event_(std::move(event)); });
}

void DataPlane::attach(std::uint32_t client_id, shm::Segment control, const shm::ControlLayout& layout,
                       UniqueFd doorbell) {
  auto state = std::make_shared<std::pair<shm::Segment, UniqueFd>>(std::move(control), std::move(doorbell));
  post([this, client_id, state, layout] {
    channels_[client_id] = std::make_unique<ClientChannel>(
        io_, client_id, std::move(state->first), layout, std::move(state->second), config_, budget_, log_,
        [this, client_id](const Error& error) { report_failure(client_id, error); },
        [this](const HandoffOrigin& origin, std::optional<tier::SequenceTiers> returned) {
          handoff_resolved(origin, std::move(returned));
        },
        [this](Event event) { report_event(std::move(event)); });
    // Attached after drain() began (registered while the daemon stops): its pool stays too.
    if (draining_) channels_[client_id]->drain();
  });
}

void DataPlane::set_pool(std::uint32_t client_id, PoolSetup pools) {
  auto state = std::make_shared<PoolSetup>(std::move(pools));
  post([this, client_id, state] {
    if (auto it = channels_.find(client_id); it != channels_.end()) it->second->set_pool(std::move(*state));
  });
}

void DataPlane::restore(std::uint32_t client_id, PoolSetup pools, std::vector<RestoredSequence> sequences,
                        std::function<void(Status)> done) {
  auto state = std::make_shared<std::pair<PoolSetup, std::vector<RestoredSequence>>>(std::move(pools),
                                                                                    std::move(sequences));
  post([this, client_id, state, done = std::move(done)] {
    Status restored = make_error(Errc::kNotFound, "client gone");
    if (auto it = channels_.find(client_id); it != channels_.end()) {
      it->second->set_pool(std::move(state->first));
      restored = it->second->restore(std::move(state->second));
      it->second->service();  // scores may have arrived already
    }
    asio::post(control_io_, [done, restored] { done(restored); });
  });
}

void DataPlane::drain(std::chrono::milliseconds timeout, std::function<void(std::size_t)> done) {
  post([this, timeout, done = std::move(done)] {
    draining_ = true;
    for (auto& [id, channel] : channels_) channel->drain();
    drain_timer_ = std::make_unique<asio::steady_timer>(io_);
    drain_round(std::chrono::steady_clock::now() + timeout, done);
  });
}

void DataPlane::drain_round(std::chrono::steady_clock::time_point deadline, std::function<void(std::size_t)> done) {
  std::size_t outstanding = 0;
  for (auto& [id, channel] : channels_) {
    channel->service();  // reads the acks that came in
    outstanding += channel->plans_in_flight();
  }
  if (outstanding != 0 && std::chrono::steady_clock::now() < deadline) {
    // Acks ring the doorbell only while the channel sleeps; a short poll catches the rest.
    drain_timer_->expires_after(std::chrono::milliseconds(2));
    drain_timer_->async_wait([this, deadline, done](std::error_code ec) {
      if (!ec) drain_round(deadline, done);
    });
    return;
  }
  for (auto& [id, channel] : channels_) channel->keep_pool_names();
  asio::post(control_io_, [done, outstanding] { done(outstanding); });
}

void DataPlane::open_sequence(std::uint32_t client_id, std::uint32_t sequence_id, std::uint32_t prompt_length,
                              const tier::TierParams& params, std::uint32_t digest_dim, std::function<void()> done) {
  post([this, client_id, sequence_id, prompt_length, params, digest_dim, done = std::move(done)] {
    if (auto it = channels_.find(client_id); it != channels_.end()) {
      it->second->open_sequence(sequence_id, prompt_length, params, digest_dim);
    }
    asio::post(control_io_, done);
  });
}

void DataPlane::close_sequence(std::uint32_t client_id, std::uint32_t sequence_id, std::function<void()> done) {
  post([this, client_id, sequence_id, done = std::move(done)] {
    if (auto it = channels_.find(client_id); it != channels_.end()) it->second->close_sequence(sequence_id);
    asio::post(control_io_, done);
  });
}

void DataPlane::detach(std::uint32_t client_id, std::function<void()> done) {
  post([this, client_id, done = std::move(done)] {
    if (auto it = channels_.find(client_id); it != channels_.end()) it->second->abandon_handoffs();
    channels_.erase(client_id);
    asio::post(control_io_, done);
  });
}

void DataPlane::export_sequence(std::uint32_t client_id, std::uint32_t sequence_id,
                                std::vector<std::pair<std::uint32_t, std::uint32_t>> t0, std::function<void(Status)> done) {
  post([this, client_id, sequence_id, t0 = std::move(t0), done = std::move(done)] {
    auto it = channels_.find(client_id);
    Status frozen = it == channels_.end() ? make_error(Errc::kNotFound, "client gone")
                                          : it->second->freeze(sequence_id, t0);
    asio::post(control_io_, [done, frozen] { done(frozen); });
  });
}

void DataPlane::adopt(HandoffOrigin origin, std::uint32_t adopter, std::uint32_t sequence_id,
                      std::function<void(Result<AdoptedSequence>)> done) {
  post([this, origin, adopter, sequence_id, done = std::move(done)] {
    const auto reply = [this, &done](Result<AdoptedSequence> result) {
      asio::post(control_io_, [done, result] { done(result); });
    };
    auto from = channels_.find(origin.exporter);
    auto to = channels_.find(adopter);
    if (from == channels_.end() || to == channels_.end()) {
      return reply(make_error(Errc::kNotFound, "the exporting client is gone"));
    }
    auto needs = from->second->needs(origin.sequence);
    if (!needs) return reply(tl::unexpected(needs.error()));
    if (auto ok = to->second->can_adopt(*needs); !ok) return reply(tl::unexpected(ok.error()));
    reply(to->second->adopt(sequence_id, from->second->lend(origin.sequence, origin)));
  });
}

void DataPlane::service_client(std::uint32_t client_id, std::function<void()> done) {
  post([this, client_id, done = std::move(done)] {
    if (auto it = channels_.find(client_id); it != channels_.end()) it->second->service();
    asio::post(control_io_, done);
  });
}

void DataPlane::on_handoff_resolved(std::function<void(const HandoffOrigin&, bool)> handler) {
  on_handoff_resolved_ = std::move(handler);
}

void DataPlane::handoff_resolved(const HandoffOrigin& origin, std::optional<tier::SequenceTiers> returned) {
  const bool applied = !returned.has_value();
  if (auto it = channels_.find(origin.exporter); it != channels_.end()) {
    it->second->finish_loan(origin.sequence, std::move(returned));
  }
  asio::post(control_io_, [this, origin, applied] {
    if (on_handoff_resolved_) on_handoff_resolved_(origin, applied);
  });
}

void DataPlane::snapshot(std::function<void(std::vector<ClientSnapshot>)> done) {
  post([this, done = std::move(done)] {
    std::vector<ClientSnapshot> out;
    for (const auto& [id, channel] : channels_) {
      out.push_back(channel->snapshot());
      out.back().ddr_share_bytes = budget_.share_bytes(*channel);
    }
    asio::post(control_io_, [done, out = std::move(out)]() mutable { done(std::move(out)); });
  });
}

void DataPlane::placement(std::uint32_t client_id, std::uint32_t sequence_id, std::uint32_t first_position,
                          std::uint32_t max_runs, std::function<void(Result<PlacementPage>)> done) {
  post([this, client_id, sequence_id, first_position, max_runs, done = std::move(done)] {
    auto it = channels_.find(client_id);
    Result<PlacementPage> page = it == channels_.end()
                                     ? Result<PlacementPage>(make_error(Errc::kNotFound, "client " + std::to_string(client_id) +
                                                                                            " has no data-plane channel"))
                                     : it->second->placement(sequence_id, first_position, max_runs);
    asio::post(control_io_, [done, page = std::move(page)]() mutable { done(std::move(page)); });
  });
}

}  // namespace kvtier::daemon
