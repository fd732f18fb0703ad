#include "handoff_peer_engine.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "kvtier/kernels/cuda/device.hpp"

namespace kvtier::workload {
namespace {
constexpr std::chrono::seconds kSync{60};  // how long kvtierd may take to catch up (a loaded CI machine)
}  // namespace

void check(const Client& client, const char* what, kvtier_status status) {
  if (status == KVTIER_OK) return;
  std::fprintf(stderr, "kvtier-handoff-peer: %s: %s: %s\n", what, kvtier_status_string(status),
               client ? client.last_error().c_str() : kvtier_client_last_error(nullptr));
  throw Failed{status == KVTIER_E_UNAVAILABLE ? 3 : 1};
}

void check(const Status& status, const char* what) {
  if (status) return;
  std::fprintf(stderr, "kvtier-handoff-peer: %s: %s\n", what, status.error().message.c_str());
  throw Failed{1};
}

float Engine::bound(std::uint32_t position) const {
  const unsigned q = position < quantized.size() ? quantized[position] : 0;
  return q == 0 ? 0.0f : kInt8Bound * 1.01f * static_cast<float>(q);
}

void Engine::apply(const kvtier_plan& plan) {
  if (plan.sequence != sequence) {
    std::fprintf(stderr, "kvtier-handoff-peer: plan %llu for sequence %u, not %u\n",
                 static_cast<unsigned long long>(plan.epoch), plan.sequence, sequence);
    throw Failed{1};
  }
  std::vector<std::uint32_t> hbm(plan.move_count);
  for (std::size_t i = 0; i < plan.move_count; ++i) {
    const kvtier_plan_move& m = plan.moves[i];
    hbm[i] = m.position;
    if (m.position >= tiers.size()) {
      std::fprintf(stderr, "kvtier-handoff-peer: plan names position %u beyond %zu\n", m.position, tiers.size());
      ++lost;
      hbm[i] = KVTIER_NO_SLOT;
      continue;
    }
    if (m.from_tier == KVTIER_TPEER && tiers[m.position] != kUnseen) {
      std::fprintf(stderr, "kvtier-handoff-peer: hand-off names position %u twice\n", m.position);
      ++lost;
    }
    tiers[m.position] = m.to_tier;
    if (m.to_tier == KVTIER_T2 && m.from_tier != KVTIER_TPEER) {
      if (quantized.size() <= m.position) quantized.resize(m.position + 1, 0);
      ++quantized[m.position];
    }
    if (m.from_tier == KVTIER_TPEER && m.to_tier == KVTIER_T0) ++peer_rows;
  }
  check(client, "execute", client.execute_plan(plan, hbm));
  check(client, "ack", client.ack_plan(plan.epoch, true));
  check(client, "sync", client.sync(kSync));  // a plan owed behind this one is out before the next poll
  ++plans;
}

bool Engine::drain(std::chrono::milliseconds timeout) {
  bool any = false;
  kvtier_plan plan{};
  for (kvtier_status st; (st = client.poll_plan(timeout, plan)) != KVTIER_E_TIMEOUT; any = true) {
    check(client, "poll", st);
    apply(plan);
  }
  return any;
}

void Engine::decode(std::uint32_t position, std::uint32_t step) {
  if (tiers.size() <= position) tiers.resize(position + 1, kUnseen);
  check(cache.write(position, position), "write row");
  tiers[position] = KVTIER_T0;
  if (digest_dim != 0) push_digests(position, 1);
  std::vector<float> scores(position + 1);
  for (std::uint32_t p = 0; p <= position; ++p) {
    const bool hot = p < 4 || position - p < 16;
    scores[p] = tiers[p] == KVTIER_T3 ? 0.0f : hot ? 1.0f : 0.001f * static_cast<float>(1 + (p * 2654435761u >> 28));
  }
  check(client, "push scores", client.push_scores(sequence, step, 0, scores));
  check(client, "step_end", client.step_end(sequence, step));
  check(client, "sync", client.sync(kSync));  // lockstep: this step's decision is on the ring
}

void Engine::push_digests(std::uint32_t first, std::uint32_t count) {
  std::vector<float> digests(std::size_t{count} * digest_dim);
  for (std::size_t i = 0; i < digests.size(); ++i) {
    const auto d = static_cast<std::uint32_t>(i % digest_dim);
    digests[i] = kv_value(first + static_cast<std::uint32_t>(i / digest_dim), 0, false, (d / kPeerDim) % kPeerHeads,
                          d % kPeerDim);
  }
  check(client, "push key digests", client.push_feature(sequence, KVTIER_FEATURE_KEY_DIGEST, first, digests));
}

bool Engine::row_ok(const float* k, const float* v, std::uint32_t position, std::uint32_t layer, std::uint32_t head, float bound) const {
  for (std::uint32_t d = 0; d < kvtier::workload::kPeerDim; ++d) {
    const float ek = kvtier::workload::kv_value(position, layer, false, head, d);
    const float ev = kvtier::workload::kv_value(position, layer, true, head, d);
    if (bound == 0.0f ? (std::memcmp(&k[d], &ek, 4) != 0 || std::memcmp(&v[d], &ev, 4) != 0)
                      : (std::fabs(k[d] - ek) > bound || std::fabs(v[d] - ev) > bound)) {
      return false;
    }
  }
  return true;
}

void Engine::mismatch(const char* what, std::uint32_t position, std::uint32_t layer) {
  if (mismatches++ < 5) std::fprintf(stderr, "kvtier-handoff-peer: %s row of position %u layer %u differs\n", what, position, layer);
}

void Engine::verify(kvtier_backend backend) {
  using kvtier::workload::kPeerHeads;
  check(cache.refresh(), "download cache");
  std::size_t expected_staged = 0;
  for (std::uint32_t p = 0; p < tiers.size(); ++p) {
    if (tiers[p] == KVTIER_T1 || tiers[p] == KVTIER_T2) ++expected_staged;
    if (tiers[p] != KVTIER_T0) continue;
    for (std::uint32_t l = 0; l < kvtier::workload::kPeerLayers; ++l) {
      for (std::uint32_t h = 0; h < kPeerHeads; ++h) {
        if (!row_ok(cache.head(l, false, h, p), cache.head(l, true, h, p), p, l, h, bound(p))) mismatch("T0", p, l);
      }
    }
  }
  std::size_t rows = 0, bytes = 0;
  check(client, "t1_rows", client.t1_rows(sequence, rows, bytes));
  if (rows != expected_staged) {
    std::fprintf(stderr, "kvtier-handoff-peer: %zu staged rows, the plans say %zu\n", rows, expected_staged);
    ++lost;
  }
  std::vector<std::byte> host(bytes);
  kvtier::kernels::cuda::DeviceBuffer device;
  if (backend == KVTIER_BACKEND_CUDA && bytes != 0) {
    auto made = kvtier::kernels::cuda::DeviceBuffer::allocate(bytes);
    check(made ? kvtier::Status{} : kvtier::Status(tl::unexpected(made.error())), "staging buffer");
    device = std::move(*made);
  }
  const std::size_t half = kPeerHeads * kvtier::workload::kPeerDim * sizeof(float);
  for (std::uint32_t l = 0; l < kvtier::workload::kPeerLayers && bytes != 0; ++l) {
    kvtier_staged_layer staged{};
    void* target = device.address() != 0 ? reinterpret_cast<void*>(device.address()) : host.data();
    check(client, "stage_layer",
          kvtier_stage_layer(client.get(), sequence, l, KVTIER_STAGE_POSITION_ORDER, target, bytes, &staged));
    std::vector<std::byte> k(staged.rows * half), v(staged.rows * half);
    if (device.address() != 0) {
      check(kvtier::kernels::cuda::copy_to_host(k.data(), reinterpret_cast<std::uintptr_t>(staged.k), k.size()), "download K");
      check(kvtier::kernels::cuda::copy_to_host(v.data(), reinterpret_cast<std::uintptr_t>(staged.v), v.size()), "download V");
    } else {
      std::memcpy(k.data(), staged.k, k.size());
      std::memcpy(v.data(), staged.v, v.size());
    }
    for (std::size_t i = 0; i < staged.rows; ++i) {
      const std::uint32_t p = staged.positions[i];
      const bool t2 = p < tiers.size() && tiers[p] == KVTIER_T2;
      if (p >= tiers.size() || (tiers[p] != KVTIER_T1 && !t2)) {
        std::fprintf(stderr, "kvtier-handoff-peer: staged position %u is not T1/T2\n", p);
        ++lost;
        continue;
      }
      for (std::uint32_t h = 0; h < kPeerHeads; ++h) {
        const auto* kh = reinterpret_cast<const float*>(k.data() + i * half) + h * kvtier::workload::kPeerDim;
        const auto* vh = reinterpret_cast<const float*>(v.data() + i * half) + h * kvtier::workload::kPeerDim;
        if (!row_ok(kh, vh, p, l, h, bound(p))) mismatch(t2 ? "T2" : "T1", p, l);
      }
    }
  }
}

unsigned Engine::count(std::uint8_t tier) const {
  unsigned n = 0;
  for (std::uint8_t t : tiers) n += t == tier ? 1 : 0;
  return n;
}

}  // namespace kvtier::workload
