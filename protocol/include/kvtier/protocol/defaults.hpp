// What an absent (zero) field of a control message means, for the fields where zero is not
// itself a meaningful value, and the bounds of a few fields. Both peers read these, so they live
// with the schema.
// Thread-safety: constants.
#pragma once

#include <cstdint>

namespace kvtier::protocol {

// TierParams.keyDigestDim: floats per key digest an r_kv client sends; 0 selects the default.
inline constexpr std::uint32_t kDefaultKeyDigestDim = 16;
inline constexpr std::uint32_t kMaxKeyDigestDim = 256;

// TierParams.tokensPerPosition (1.7): tokens one position stands for; 0 means 1. The largest a
// client may send: a block of 65536 tokens is far beyond any engine's block size.
inline constexpr std::uint32_t kMaxTokensPerPosition = 65536;

// PlacementRequest.maxRuns: 1..kMaxPlacementRuns runs per page; 65536 runs of 8 bytes each keep
// a PlacementReply within the 1 MiB frame limit (PROTOCOL.md §2, §4 "Events and placement").
inline constexpr std::uint32_t kMaxPlacementRuns = 65536;

}  // namespace kvtier::protocol
