#include "data_plane.hpp"

#include <asio/post.hpp>

#include "client_channel.hpp"

namespace kvtier::daemon {

DataPlane::DataPlane(asio::io_context& control_io, const config::DaemonConfig& config, spdlog::logger& log)
    : control_io_(control_io),
      config_(config),
      log_(log),
      work_(asio::make_work_guard(io_)),
      budget_(config.pools, channels_, [this](std::uint32_t client_id) {
        // A client asked to give rows back is serviced on its own turn, never inside another
        // client's decision; it may be gone by then.
        post([this, client_id] {
          if (auto it = channels_.find(client_id); it != channels_.end()) it->second->service();
        });
      }) {}

DataPlane::~DataPlane() { stop(); }

void DataPlane::start(FailHandler on_fail) {
  on_fail_ = std::move(on_fail);
  thread_ = std::jthread([this] { io_.run(); });
}

void DataPlane::stop() {
  if (!thread_.joinable()) return;
  asio::post(io_, [this] { channels_.clear(); });
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

void DataPlane::attach(std::uint32_t client_id, shm::Segment control, const shm::ControlLayout& layout,
                       shm::UniqueFd doorbell) {
  auto state = std::make_shared<std::pair<shm::Segment, shm::UniqueFd>>(std::move(control), std::move(doorbell));
  post([this, client_id, state, layout] {
    channels_[client_id] = std::make_unique<ClientChannel>(
        io_, client_id, std::move(state->first), layout, std::move(state->second), config_, budget_, log_,
        [this, client_id](const Error& error) { report_failure(client_id, error); });
  });
}

void DataPlane::set_pool(std::uint32_t client_id, PoolSetup pools) {
  auto state = std::make_shared<PoolSetup>(std::move(pools));
  post([this, client_id, state] {
    if (auto it = channels_.find(client_id); it != channels_.end()) it->second->set_pool(std::move(*state));
  });
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
    channels_.erase(client_id);
    asio::post(control_io_, done);
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

}  // namespace kvtier::daemon
