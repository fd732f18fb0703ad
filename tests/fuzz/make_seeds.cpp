// kvtier_fuzz_seeds <corpus dir>: writes the hand-made seed inputs of every fuzz target into
// <corpus dir>/<target>/seed-<name>, replacing the seed-* files there (regress-* files, inputs
// that once found a bug, are left alone). Deterministic: the same build writes the same bytes.
//
// Each writer below builds its input with the calls the target's fuzzer reads it with (the
// format is described at the top of each *_fuzz.cpp; fuzz_input.hpp has the primitives).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <capnp/message.h>

#include "fuzz_input.hpp"
#include "kvtier/config/config.hpp"
#include "kvtier/protocol/control.capnp.h"
#include "kvtier/protocol/framing.hpp"
#include "kvtier/protocol/version.hpp"
#include "kvtier/shm/layout.hpp"

namespace {

namespace fs = std::filesystem;
namespace wire = kvtier::wire;
using kvtier::fuzz::SeedWriter;

class Corpus {
 public:
  Corpus(fs::path root, const std::string& target) : dir_(std::move(root) / target) {
    fs::create_directories(dir_);
    for (const auto& entry : fs::directory_iterator(dir_)) {
      if (entry.path().filename().string().rfind("seed-", 0) == 0) fs::remove(entry.path());
    }
  }
  void write(const std::string& name, const std::vector<std::uint8_t>& bytes) {
    std::ofstream out(dir_ / ("seed-" + name), std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    ++count_;
  }
  int count() const { return count_; }

 private:
  fs::path dir_;
  int count_ = 0;
};

// --- frame_dispatch: u8 split, then frames ---------------------------------------------------

class Stream {
 public:
  explicit Stream(std::uint8_t split) { bytes_.push_back(split); }
  template <class Fill>
  Stream& add(Fill fill) {
    capnp::MallocMessageBuilder message;
    fill(message.initRoot<wire::ClientMessage>());
    auto frame = kvtier::protocol::encode_frame(message);
    for (std::byte b : *frame) bytes_.push_back(static_cast<std::uint8_t>(b));
    return *this;
  }
  Stream& raw(std::initializer_list<std::uint8_t> bytes) {
    bytes_.insert(bytes_.end(), bytes);
    return *this;
  }
  const std::vector<std::uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<std::uint8_t> bytes_;
};

auto hello(wire::SessionRole role, std::uint16_t major = kvtier::protocol::kProtocolMajor) {
  return [role, major](wire::ClientMessage::Builder m) {
    auto h = m.initHello();
    h.setProtocolMajor(major);
    h.setProtocolMinor(kvtier::protocol::kProtocolMinor);
    h.setLayoutVersion(kvtier::shm::kLayoutVersion);
    h.setLayoutFingerprint(kvtier::shm::kLayoutFingerprint);
    h.setClientName("fuzz-seed");
    h.setRole(role);
  };
}

auto register_model(std::uint32_t int8_tokens) {
  return [int8_tokens](wire::ClientMessage::Builder m) {
    auto r = m.initRegisterModel();
    r.setNumLayers(2);
    r.setNumKvHeads(2);
    r.setHeadDim(8);
    r.setDtype(wire::KvDtype::F16);
    r.setModelName("toy");
    r.setPoolTokens(64);
    r.setInt8PoolTokens(int8_tokens);
    r.setWeight(2);
  };
}

auto open_sequence(bool defaults, double int8_ratio = 0) {
  return [defaults, int8_ratio](wire::ClientMessage::Builder m) {
    auto o = m.initOpenSequence();
    o.setPromptLength(16);
    auto t = o.initTiering();
    t.setUseDefaults(defaults);
    if (defaults) return;
    t.setSinkTokens(4);
    t.setWindowTokens(8);
    t.setInterval(2);
    t.setHbmRatio(0.5);
    t.setEvictRatio(0.1);
    t.setDecay(1.0);
    t.setPolicy(wire::Policy::H2O);
    t.setValueProtectRatio(0.25);
    t.setRkvLambda(0.1);
    t.setInt8Ratio(int8_ratio);
  };
}

// An HF-style cache for the seeds' model (2 layers, 2 KV heads, head_dim 8, f16): per layer K
// then V, each [heads][slots][dim].
auto export_sequence(wire::BufferKind kind) {
  return [kind](wire::ClientMessage::Builder m) {
    constexpr std::uint64_t kSlots = 32, kHeadBytes = 16, kTensor = 2 * kSlots * kHeadBytes;
    auto e = m.initExportSequence();
    e.setSequenceId(1);
    auto c = e.initCache();
    c.setKind(kind);
    c.setBytes(4 * kTensor);
    c.setBufferId(9);
    if (kind == wire::BufferKind::CUDA_IPC) c.initIpcHandle(64);
    auto k = c.initKOffsets(2), v = c.initVOffsets(2);
    for (unsigned l = 0; l < 2; ++l) {
      k.set(l, 2 * l * kTensor);
      v.set(l, (2 * l + 1) * kTensor);
    }
    c.setNumSlots(kSlots);
    c.setBlockSize(kSlots);
    c.setTokenStride(kHeadBytes);
    c.setHeadStride(kSlots * kHeadBytes);
    c.setBlockStride(2 * kSlots * kHeadBytes);
    auto positions = e.initT0Positions(3), slots = e.initT0Slots(3);
    for (unsigned i = 0; i < 3; ++i) {
      positions.set(i, 2 * i);
      slots.set(i, i);
    }
  };
}

// A Reattach of two sequences with T1, T2 and T3 tokens (the pool fds never reach a fuzzer).
auto reattach() {
  return [](wire::ClientMessage::Builder m) {
    auto r = m.initReattach();
    r.setPreviousEpoch(0x1234);
    r.setPreviousClientId(3);
    auto model = r.initModel();
    model.setNumLayers(2);
    model.setNumKvHeads(2);
    model.setHeadDim(8);
    model.setDtype(wire::KvDtype::F16);
    model.setPoolTokens(64);
    model.setInt8PoolTokens(64);
    auto sequences = r.initSequences(2);
    for (unsigned i = 0; i < 2; ++i) {
      auto s = sequences[i];
      s.setSequenceId(i + 1);
      s.setPromptLength(8);
      s.setLength(200);
      auto t = s.initTiering();
      t.setUseDefaults(false);
      t.setSinkTokens(4);
      t.setWindowTokens(16);
      t.setInterval(8);
      t.setHbmRatio(0.25);
      t.setDecay(1.0);
      t.setInt8Ratio(0.3);
      auto t1 = s.initT1Positions(2), t1_slots = s.initT1Slots(2);
      t1.set(0, 12);
      t1.set(1, 20);
      t1_slots.set(0, 2 * i);
      t1_slots.set(1, 2 * i + 1);
      s.initT2Positions(1).set(0, 30);
      s.initT2Slots(1).set(0, 32 * i);
      s.initT3Positions(1).set(0, 13);
    }
  };
}

void frame_seeds(const fs::path& root) {
  Corpus corpus(root, "frame_dispatch");
  const auto engine = hello(wire::SessionRole::ENGINE);
  corpus.write("engine-session", Stream(0)
                                     .add(engine)
                                     .add(register_model(0))
                                     .add(open_sequence(true))
                                     .add(open_sequence(false))
                                     .add([](auto m) { m.initCloseSequence().setSequenceId(2); })
                                     .add(export_sequence(wire::BufferKind::HOST_FD))
                                     .add([](auto m) { m.initAdoptSequence().setHandoffToken(4); })
                                     .bytes());
  corpus.write("engine-int8-split7", Stream(6)
                                         .add(engine)
                                         .add(register_model(100))
                                         .add(open_sequence(false, 0.5))
                                         .add(export_sequence(wire::BufferKind::CUDA_IPC))
                                         .bytes());
  corpus.write("engine-reattach", Stream(0).add(engine).add(reattach()).add(open_sequence(false)).bytes());
  corpus.write("admin-status", Stream(60)
                                   .add(hello(wire::SessionRole::ADMIN))
                                   .add([](auto m) { m.initStatusRequest(); })
                                   .add(register_model(0))
                                   .bytes());
  corpus.write("admin-events-placement", Stream(30)
                                             .add(hello(wire::SessionRole::ADMIN))
                                             .add([](auto m) { m.initEventsRequest().setLimit(20); })
                                             .add([](auto m) {
                                               auto p = m.initPlacementRequest();
                                               p.setClientId(1);
                                               p.setSequenceId(1);
                                               p.setMaxRuns(4);
                                             })
                                             .bytes());
  corpus.write("version-mismatch", Stream(0).add(hello(wire::SessionRole::ENGINE, 99)).bytes());
  corpus.write("request-before-hello", Stream(0).add(register_model(0)).bytes());
  corpus.write("bad-length", Stream(0).add(engine).raw({5, 0, 0, 0, 1, 2, 3, 4, 5}).bytes());
  corpus.write("partial-frame", Stream(1).add(engine).raw({16, 0, 0, 0, 0, 0, 0, 0}).bytes());
  std::printf("frame_dispatch: %d seeds\n", corpus.count());
}

// --- shm_rings -----------------------------------------------------------------------------

void shm_seeds(const fs::path& root) {
  Corpus corpus(root, "shm_rings");
  {  // control: score capacity 8, plan capacity 4; push, drain, plan, ack, re-validate
    SeedWriter w;
    w.put<std::uint8_t>(0).put<std::uint8_t>(3 | (2 << 2));
    for (int i = 0; i < 3; ++i) {
      w.put<std::uint8_t>(1).put<std::uint32_t>(1).put<std::uint32_t>(60 * i).put<std::uint16_t>(60)
          .put<std::uint16_t>(0).put<std::uint32_t>(0);
    }
    w.put<std::uint8_t>(1).put<std::uint32_t>(1).put<std::uint32_t>(0).put<std::uint16_t>(0)
        .put<std::uint16_t>(1).put<std::uint32_t>(1);
    w.put<std::uint8_t>(2).put<std::uint8_t>(7);
    w.put<std::uint8_t>(4).put<std::uint8_t>(63).put<std::uint32_t>(1).put<std::uint8_t>(0);
    w.put<std::uint8_t>(4).put<std::uint8_t>(10).put<std::uint32_t>(1).put<std::uint8_t>(1);
    w.put<std::uint8_t>(6).put<std::uint8_t>(3).put<std::uint8_t>(1);
    w.put<std::uint8_t>(5).put<std::uint8_t>(3).put<std::uint8_t>(8).put<std::uint8_t>(9)
        .put<std::uint8_t>(1).put<std::uint8_t>(1).put<std::uint8_t>(10);
    corpus.write("control-round-trip", w.bytes());
  }
  {  // control: a client that corrupts its counters and the control block
    SeedWriter w;
    w.put<std::uint8_t>(0).put<std::uint8_t>(0);
    w.put<std::uint8_t>(7).put<std::uint64_t>(1000).put<std::uint8_t>(3);
    w.put<std::uint8_t>(2).put<std::uint8_t>(0);
    w.put<std::uint8_t>(7).put<std::uint64_t>(5).put<std::uint8_t>(0);
    w.put<std::uint8_t>(5);
    w.put<std::uint8_t>(0).put<std::uint8_t>(4).put<std::uint16_t>(8).put<std::uint8_t>(7)
        .put<std::uint64_t>(0xffffffffffffffffull);
    w.put<std::uint8_t>(8);
    corpus.write("control-corrupt", w.bytes());
  }
  {  // control: three plans, acked out of order and one failed, then a scribbled ack slot
    SeedWriter w;
    w.put<std::uint8_t>(0).put<std::uint8_t>(3 | (2 << 2));
    for (std::uint32_t sequence = 1; sequence <= 3; ++sequence) {
      w.put<std::uint8_t>(4).put<std::uint8_t>(4).put<std::uint32_t>(sequence).put<std::uint8_t>(1);
    }
    w.put<std::uint8_t>(6).put<std::uint8_t>(2).put<std::uint8_t>(1);  // pops 3, acks epoch 3
    w.put<std::uint8_t>(5);
    w.put<std::uint8_t>(7).put<std::uint64_t>(9).put<std::uint8_t>(1);  // an ack slot names epoch 9
    w.put<std::uint8_t>(7).put<std::uint64_t>(2).put<std::uint8_t>(0);  // ack_write = 2
    w.put<std::uint8_t>(5);
    w.put<std::uint8_t>(3);
    corpus.write("control-acks", w.bytes());
  }
  for (const std::uint8_t kind : {std::uint8_t{1}, std::uint8_t{2}}) {  // a pool / int8 pool segment, then one poke of its block
    SeedWriter w;
    w.put<std::uint8_t>(kind).put<std::uint8_t>(1).put<std::uint8_t>(1).put<std::uint8_t>(15)
        .put<std::uint8_t>(kind == 1 ? 1 : 7).put<std::uint8_t>(3).put<std::uint8_t>(5);
    corpus.write(kind == 1 ? "pool" : "int8-pool", w.bytes());
    w.put<std::uint8_t>(0).put<std::uint16_t>(16).put<std::uint8_t>(3).put<std::uint32_t>(1000);
    corpus.write(kind == 1 ? "pool-poked" : "int8-pool-poked", w.bytes());
  }
  std::printf("shm_rings: %d seeds\n", corpus.count());
}

// --- client_channel -------------------------------------------------------------------------

// The channel's setup: score ring 8, plan ring 4, 1 layer, 2 heads, head_dim 16, f16, 32 slots.
SeedWriter channel_setup(std::uint8_t int8_blocks, std::uint8_t rule) {
  SeedWriter w;
  w.put<std::uint8_t>(3 | (2 << 2)).put<std::uint8_t>(0).put<std::uint8_t>(1).put<std::uint8_t>(1)
      .put<std::uint8_t>(0).put<std::uint8_t>(31).put(int8_blocks).put(rule);
  return w;
}

// OpenSequence: prompt 16, interval 1, sink 2, window 4, hbm 128/255, evict 30/255.
void channel_open(SeedWriter& w, std::uint8_t policy, std::uint8_t int8_ratio) {
  w.put<std::uint8_t>(0).put<std::uint8_t>(16).put(policy).put<std::uint8_t>(0).put<std::uint8_t>(0)
      .put<std::uint8_t>(2).put<std::uint8_t>(4).put<std::uint8_t>(128).put<std::uint8_t>(30);
  w.put<std::uint8_t>(1).put<std::uint8_t>(1);  // no absolute budgets
  if (int8_ratio != 0) {
    w.put<std::uint8_t>(1).put(int8_ratio);
  } else {
    w.put<std::uint8_t>(0);
  }
  w.put<std::uint8_t>(3);  // key digest dim 4
}

// One decode step of sequence index `sequence`: `count` values of `kind` from position 0, a step
// end, the doorbell, then (with `ack`) the client acks whatever plans came.
void channel_step(SeedWriter& w, std::uint8_t kind, std::uint8_t count, std::uint8_t salt, std::uint8_t sequence = 0,
                  bool ack = true) {
  w.put<std::uint8_t>(2).put(sequence).put(kind).put<std::uint16_t>(0).put<std::uint8_t>(0).put(count);
  for (std::uint8_t i = 0; i < count; ++i) w.put(static_cast<std::uint8_t>((i * 29 + salt) % 200));
  w.put<std::uint8_t>(0);
  w.put<std::uint8_t>(2).put(sequence).put<std::uint8_t>(1).put<std::uint16_t>(0).put<std::uint8_t>(0)
      .put<std::uint8_t>(0).put<std::uint8_t>(0).put<std::uint8_t>(1);
  if (ack) w.put<std::uint8_t>(4).put<std::uint8_t>(1);
}

void channel_seeds(const fs::path& root) {
  Corpus corpus(root, "client_channel");
  {
    SeedWriter w = channel_setup(0, 0);
    channel_open(w, 0, 0);
    for (std::uint8_t s = 0; s < 4; ++s) channel_step(w, 0, 24, s);
    w.put<std::uint8_t>(8);
    corpus.write("paper-steps", w.bytes());
  }
  {  // int8 pool, a node budget, garbage in the pool rows, then an export and a close
    SeedWriter w = channel_setup(4, 4);
    channel_open(w, 1, 128);
    w.put<std::uint8_t>(6).put<std::uint32_t>(4096).put<std::uint8_t>(31);
    for (int i = 0; i < 32; ++i) w.put<std::uint8_t>(0xff);
    for (std::uint8_t s = 0; s < 4; ++s) channel_step(w, 0, 30, s);
    w.put<std::uint8_t>(7).put<std::uint8_t>(0).put<std::uint8_t>(20).put<std::uint8_t>(1);
    w.put<std::uint8_t>(8).put<std::uint8_t>(1).put<std::uint8_t>(0);
    corpus.write("int8-budget-export", w.bytes());
  }
  {  // vase (value ranges) and r_kv (key digests)
    SeedWriter w = channel_setup(0, 2);
    channel_open(w, 4, 0);
    channel_step(w, 2, 20, 1);
    channel_step(w, 0, 20, 2);
    channel_open(w, 5, 0);
    w.put<std::uint8_t>(2).put<std::uint8_t>(1).put<std::uint8_t>(3).put<std::uint16_t>(0).put<std::uint8_t>(0)
        .put<std::uint8_t>(16);
    for (std::uint8_t i = 0; i < 16; ++i) w.put<std::uint8_t>(i);
    w.put<std::uint8_t>(1);
    corpus.write("vase-rkv", w.bytes());
  }
  {  // per-decision shipping (interval 1: every step completes an interval): vase's attention
     // and recent-attention sums, then paper's sums
    SeedWriter w = channel_setup(0, 0);
    channel_open(w, 4, 0);
    for (std::uint8_t s = 0; s < 3; ++s) {
      channel_step(w, 4, 24, s);
      channel_step(w, 5, 24, s);
    }
    channel_open(w, 0, 0);
    w.put<std::uint8_t>(2).put<std::uint8_t>(1).put<std::uint8_t>(4).put<std::uint16_t>(0).put<std::uint8_t>(0)
        .put<std::uint8_t>(12);
    for (std::uint8_t i = 0; i < 12; ++i) w.put<std::uint8_t>(i);
    w.put<std::uint8_t>(1);
    corpus.write("interval-sums", w.bytes());
  }
  for (const std::uint8_t rule : {std::uint8_t{0}, std::uint8_t{8}}) {  // two sequences due together:
    // window 4, then window 1; the client acks each complete plan newest first, then fails some
    SeedWriter w = channel_setup(0, rule);
    channel_open(w, 0, 0);
    channel_open(w, 0, 0);
    for (std::uint8_t s = 0; s < 4; ++s) {
      channel_step(w, 0, 24, s, 0, false);
      channel_step(w, 0, 24, s, 1, false);
      w.put<std::uint8_t>(4).put<std::uint8_t>(s == 3 ? 0 : 1);
    }
    w.put<std::uint8_t>(8);
    corpus.write(rule == 0 ? "two-sequences-window" : "two-sequences-window-1", w.bytes());
  }
  std::printf("client_channel: %d seeds\n", corpus.count());
}

// --- config --------------------------------------------------------------------------------

void config_seeds(const fs::path& root, const fs::path& source_dir) {
  Corpus corpus(root, "config");
  auto text = [](const std::string& s) { return std::vector<std::uint8_t>(s.begin(), s.end()); };
  corpus.write("defaults", text(kvtier::config::to_toml(kvtier::config::DaemonConfig{})));
  if (std::ifstream shipped(source_dir / "systemd" / "kvtierd.toml"); shipped) {
    std::string s((std::istreambuf_iterator<char>(shipped)), std::istreambuf_iterator<char>());
    corpus.write("shipped-kvtierd-toml", text(s));
  }
  corpus.write("overrides", text("limits.max_clients=8\n"
                                 "daemon.log_level=debug\n"
                                 "tiering.hbm_ratio=0.25\n"
                                 "pools.pressure=\"evict\"\n"
                                 "tiering.policy=h2o\n"));
  corpus.write("tables", text("[daemon]\nruntime_dir = \"/run/kvtier\"\nshm_prefix = \"kv_1\"\n"
                              "[limits]\nscore_ring_records = 1024\nplan_ring_records = 256\n"
                              "[tiering]\neviction_mode = \"paper-prototype\"\nint8_ratio = 0.0\n"
                              "[pools]\nddr_bytes_total = 1073741824\nint8_group_tokens = 16\n"));
  corpus.write("metrics", text("[metrics]\nlisten = \"[::1]:9464\"\n"));
  corpus.write("errors", text("[limits]\nmax_clinets = 3\n[tiering]\nhbm_ratio = 1.5\n"));
  std::printf("config: %d seeds\n", corpus.count());
}

// --- handoff -------------------------------------------------------------------------------

// The geometry section: 2 layers, 2 heads, head_dim 8, f16, 64 pool slots.
void handoff_geometry(SeedWriter& w, std::uint8_t dtype = 0) {
  w.put<std::uint8_t>(1).put<std::uint8_t>(1).put<std::uint16_t>(7).put<std::uint8_t>(dtype).put<std::uint16_t>(63);
}

// The cache section: HF layout (tokens inside heads) or paged NHD (heads inside tokens).
void handoff_cache(SeedWriter& w, bool paged, std::uint16_t kind) {
  constexpr std::uint64_t kSlots = 32, kHeadBytes = 16, kTensor = 2 * kSlots * kHeadBytes;
  w.put<std::uint16_t>(kind).put<std::uint64_t>(4 * kTensor).put<std::uint8_t>(kind == 1 ? 64 : 0).put<std::uint8_t>(1);
  for (std::uint64_t l = 0; l < 2; ++l) w.put<std::uint64_t>(2 * l * kTensor).put<std::uint64_t>((2 * l + 1) * kTensor);
  if (paged) {  // 4 blocks of 8 tokens, [block][token][head][dim]
    w.put<std::uint32_t>(kSlots).put<std::uint32_t>(8).put<std::uint64_t>(2 * kHeadBytes).put<std::uint64_t>(kHeadBytes)
        .put<std::uint64_t>(8 * 2 * kHeadBytes);
  } else {
    w.put<std::uint32_t>(kSlots).put<std::uint32_t>(kSlots).put<std::uint64_t>(kHeadBytes)
        .put<std::uint64_t>(kSlots * kHeadBytes).put<std::uint64_t>(kTensor);
  }
  for (std::uint32_t i = 0; i < 4; ++i) w.put<std::uint32_t>(7 * i + 3).put<std::uint32_t>(i);
}

void handoff_rest(SeedWriter& w, std::uint8_t t0_mode) {
  w.put<std::uint8_t>(3).put<std::uint8_t>(0);  // wire T0 list: 3 entries
  for (std::uint32_t i = 0; i < 3; ++i) w.put<std::uint32_t>(2 * i).put<std::uint32_t>(i);
  // Tiers: prompt 8, sink 2, window 4, hbm share 128/255, evict share 20/255, two rounds.
  w.put<std::uint8_t>(8).put<std::uint8_t>(2).put<std::uint8_t>(4).put<std::uint8_t>(128).put<std::uint8_t>(20);
  w.put<std::uint8_t>(2);
  for (std::uint8_t round = 0; round < 2; ++round) {
    const std::uint8_t added = 24, length = static_cast<std::uint8_t>(8 + 24 * round + added);
    w.put<std::uint8_t>(added);
    for (std::uint8_t p = 0; p < length; ++p) w.put<std::uint8_t>(static_cast<std::uint8_t>((p * 37 + round) % 251));
  }
  w.put<std::uint8_t>(t0_mode).put<std::uint32_t>(5);
  w.put<std::uint8_t>(0);  // adopter: same geometry
  // Room: 100 live tokens, 10 T1 rows, 1 T2 block; equal rows and groups; 4 plan records,
  // 20 free rows, an int8 pool of group 32 with 2 free blocks.
  w.put<std::uint32_t>(100).put<std::uint32_t>(10).put<std::uint32_t>(1).put<std::uint8_t>(0).put<std::uint8_t>(0);
  w.put<std::uint32_t>(4).put<std::uint32_t>(20).put<std::uint8_t>(1).put<std::uint32_t>(32).put<std::uint32_t>(2);
}

void handoff_seeds(const fs::path& root) {
  Corpus corpus(root, "handoff");
  for (std::uint8_t mode = 0; mode < 4; ++mode) {
    SeedWriter w;
    handoff_geometry(w);
    handoff_cache(w, mode % 2 == 1, mode == 2 ? 1 : 0);
    handoff_rest(w, mode);
    corpus.write("hf-and-paged-" + std::to_string(mode), w.bytes());
  }
  SeedWriter bf16;
  handoff_geometry(bf16, 1);
  handoff_cache(bf16, false, 2);
  handoff_rest(bf16, 0);
  corpus.write("bf16-vmm", bf16.bytes());
  std::printf("handoff: %d seeds\n", corpus.count());
}

// --- kv_layout -----------------------------------------------------------------------------

std::vector<std::uint8_t> layout_seed(std::uint8_t maker, std::uint8_t dtype, std::uint32_t layers,
                                      std::uint32_t heads, std::uint32_t dim, std::uint32_t slots, std::uint32_t block,
                                      std::uint64_t ts, std::uint64_t hs, std::uint64_t bs) {
  SeedWriter w;
  w.put(maker).put(dtype).put(layers).put(heads).put(dim).put(slots).put(block).put(ts).put(hs).put(bs);
  w.put<std::uint8_t>(0);  // synthetic pointers
  for (std::uint32_t i = 0; i < 4; ++i) w.put<std::uint32_t>(i * 13 + 5).put<std::uint32_t>(i);
  return w.bytes();
}

void layout_seeds(const fs::path& root) {
  Corpus corpus(root, "kv_layout");
  corpus.write("hf", layout_seed(1, 0, 4, 8, 128, 4096, 0, 0, 0, 0));
  corpus.write("paged-nhd", layout_seed(2, 1, 2, 4, 64, 16, 16, 0, 0, 0));
  corpus.write("paged-hnd", layout_seed(3, 2, 2, 4, 64, 16, 16, 0, 0, 0));
  // Raw NHD blocks: 3 blocks of 4 tokens, 2 heads of 8 f16 elements.
  corpus.write("raw-nhd", layout_seed(0, 0, 1, 2, 8, 12, 4, 32, 16, 128));
  // Raw, tokens inside heads with padding between blocks.
  corpus.write("raw-hnd-padded", layout_seed(0, 2, 3, 2, 4, 10, 5, 16, 80, 192));
  {  // raw pointers from the input
    SeedWriter w;
    w.put<std::uint8_t>(0).put<std::uint8_t>(0).put<std::uint32_t>(2).put<std::uint32_t>(1).put<std::uint32_t>(4)
        .put<std::uint32_t>(8).put<std::uint32_t>(8).put<std::uint64_t>(8).put<std::uint64_t>(8).put<std::uint64_t>(64);
    w.put<std::uint8_t>(1);
    for (std::uint64_t p : {0x1000ull, 0x2000ull, 0x3000ull, 0xfffffffffffff000ull}) w.put(p);
    corpus.write("raw-pointers", w.bytes());
  }
  std::printf("kv_layout: %d seeds\n", corpus.count());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: %s <corpus dir> [<source dir>]\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  const fs::path source = argc == 3 ? fs::path(argv[2]) : root / ".." / ".." / "..";
  frame_seeds(root);
  shm_seeds(root);
  channel_seeds(root);
  config_seeds(root, source);
  handoff_seeds(root);
  layout_seeds(root);
  return 0;
}
