// ClientChannel: the data plane's view of one engine client: its control segment (score and
// plan rings), doorbell, pool and open sequences. Everything read from the rings is copied out
// and validated before use; a violation returns an error and the DataPlane ends the session.
//
// Thread-safety: data-plane thread only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <spdlog/logger.h>

#include "data_plane.hpp"
#include "kvtier/config/config.hpp"
#include "kvtier/shm/control_segment.hpp"
#include "kvtier/shm/segment.hpp"

namespace kvtier::daemon {

class ClientChannel {
 public:
  using FailFn = std::function<void(const Error&)>;

  ClientChannel(asio::io_context& io, std::uint32_t client_id, shm::Segment control, const shm::ControlLayout& layout,
                shm::UniqueFd doorbell, const config::DaemonConfig& config, spdlog::logger& log, FailFn on_fail);
  ~ClientChannel();

  void set_pool(shm::Segment pool, const shm::PoolGeometry& geometry);
  void open_sequence(std::uint32_t sequence_id, std::uint32_t prompt_length);
  void close_sequence(std::uint32_t sequence_id);
  ClientSnapshot snapshot() const;

  // Drains what the client published (scores, acks). Called on a doorbell and before a close.
  void service();

 private:
  struct Sequence {
    std::uint32_t prompt_length = 0;
    std::uint32_t tokens = 0;
  };

  void arm_doorbell();
  Status drain_scores();
  Status ingest(const shm::ScoreRecord& record);
  void fail(const Error& error);

  std::uint32_t client_id_;
  const config::DaemonConfig& config_;
  spdlog::logger& log_;
  FailFn on_fail_;
  shm::Segment control_;
  shm::DaemonRings rings_;
  asio::posix::stream_descriptor doorbell_;
  std::optional<shm::Segment> pool_;
  std::optional<shm::PoolGeometry> geometry_;
  std::map<std::uint32_t, Sequence> sequences_;
  std::uint64_t score_records_ = 0;
  std::uint64_t errors_ = 0;
  bool failed_ = false;
};

}  // namespace kvtier::daemon
