// Role views over the score ring (client -> daemon): ScoreProducer for the client,
// ScoreConsumer for the daemon. Layout, index diagram and memory orders: ring_layout.hpp.
//
// The client never blocks: a full ring drops the record and counts it. The daemon sleeps on many
// clients at once (epoll over per-client eventfds), so instead of a futex the ring carries a
// consumer_waiting flag: the daemon announces sleep, and the push that finds the flag set tells
// the client to ring its eventfd doorbell (exactly once per announced sleep).
//
// Thread-safety: each view is used by one thread at a time; one producer view and one consumer
// view per ring, in different processes or threads. Views do not own the memory; the mapping
// must outlive them. Capacity is copied at construction and never re-read from shared memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvtier/base/error.hpp"
#include "kvtier/shm/records.hpp"
#include "kvtier/shm/ring_layout.hpp"

namespace kvtier::shm {

enum class PushResult {
  kPushed,      // published
  kPushedWake,  // published, and the daemon was asleep: ring the doorbell
  kDropped,     // ring full: dropped and counted in the shared `dropped` counter
};

// What ScoreProducer::push_batch did: records [0, pushed) of the batch were published, the
// remaining `dropped` were not (ring full) and were counted like push() drops.
struct BatchPushResult {
  std::size_t pushed = 0;
  std::size_t dropped = 0;
  bool wake = false;  // the daemon was asleep: ring the doorbell (as PushResult::kPushedWake)
};

class ScoreProducer {
 public:
  // `ring`: the ring's bytes (ScoreRingHeader + slots), 64-byte aligned, at least
  // score_ring_bytes(capacity). Precondition: is_valid_ring_capacity(capacity).
  // Resumes from the write counter in shared memory (0 on a fresh ring).
  ScoreProducer(std::span<std::byte> ring, std::uint32_t capacity) noexcept;

  // Never blocks. Copies `record` into the next slot and publishes it.
  PushResult push(const ScoreRecord& record) noexcept;

  // Never blocks. Copies the longest prefix of `records` that fits into the ring and publishes it
  // with one counter store (one cache-line hand-off and one look at the sleep flag per batch
  // instead of per record); the rest is dropped and counted. Same effect on the ring as calling
  // push() for each record in order, except that the daemon sees the prefix all at once.
  BatchPushResult push_batch(std::span<const ScoreRecord> records) noexcept;

  // Slots free right now (reloads the daemon's read counter).
  std::uint64_t free_slots() noexcept;
  std::uint64_t dropped() const noexcept { return dropped_; }
  std::uint64_t published() const noexcept { return write_; }
  std::uint32_t capacity() const noexcept { return capacity_; }
  // True when the daemon announced sleep after consuming every record published so far: it
  // raises the flag only after draining, and each push that finds it raised clears it. With
  // PlanConsumer::producer_idle this is the client's sync point (LAYOUT.md, "Sync").
  bool consumer_idle() const noexcept;

 private:
  ScoreRingHeader* header_;
  ScoreRecord* slots_;
  std::uint32_t capacity_;
  std::uint64_t mask_;
  std::uint64_t write_;       // authoritative; mirrored into shared memory
  std::uint64_t read_cache_;  // last read counter seen from the daemon
  std::uint64_t dropped_;
};

class ScoreConsumer {
 public:
  // Same preconditions as ScoreProducer. Resumes from the read counter in shared memory (0 on a
  // fresh ring; on an adopted ring a corrupt value shows up as a kProtocol error from pop()).
  ScoreConsumer(std::span<std::byte> ring, std::uint32_t capacity) noexcept;

  // Copies up to out.size() records out of shared memory, then validates them, then frees their
  // slots. Errors (kProtocol, the client broke the ring; end its session): write counter moved
  // backwards, is more than capacity ahead of read, or a record's count exceeds kScoresPerRecord.
  Result<std::size_t> pop(std::span<ScoreRecord> out);
  // pop() one record at a time, for a consumer that handles each record as soon as it is copied
  // (kvtierd's intake ran markedly slower copying 64 records out and then handling them:
  // tests/bench/score_ingest_bench.cpp, README "The misses"). available(max)
  // checks the write counter as pop() does and returns how many records are published, at most
  // max; take(k, out) copies the k-th of them (k < that count) out of shared memory and checks
  // the copy as pop() does; release(n) frees the first n of them (n <= that count) and ends the
  // round. pop(out) is available(out.size()), take() of each, release() of all.
  Result<std::size_t> available(std::size_t max);
  Status take(std::size_t k, ScoreRecord& out) const;
  void release(std::size_t count) noexcept;

  // Sets consumer_waiting, then re-checks the ring. Returns true when the caller may sleep on the
  // client's doorbell; false (flag cleared again) when records, or a corrupt counter, are
  // pending, so the caller must pop instead of sleeping.
  bool announce_sleep() noexcept;
  // Clears consumer_waiting after waking (or when giving up the sleep).
  void cancel_sleep() noexcept;

  // Records the client says it dropped. Client-written and only informational.
  std::uint64_t dropped() const noexcept;
  std::uint64_t consumed() const noexcept { return read_; }
  std::uint32_t capacity() const noexcept { return capacity_; }

 private:
  ScoreRingHeader* header_;
  const ScoreRecord* slots_;
  std::uint32_t capacity_;
  std::uint64_t read_;        // authoritative; mirrored into shared memory
  std::uint64_t last_write_;  // highest write counter accepted so far
  std::size_t available_ = 0;  // granted by the last available(), until release()
};

}  // namespace kvtier::shm
