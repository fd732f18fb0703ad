// What an absent (zero) field of a control message means, for the fields where zero is not
// itself a meaningful value. Both peers read these, so they live with the schema.
// Thread-safety: constants.
#pragma once

#include <cstdint>

namespace kvtier::protocol {

// TierParams.keyDigestDim: floats per key digest an r_kv client sends; 0 selects the default.
inline constexpr std::uint32_t kDefaultKeyDigestDim = 16;
inline constexpr std::uint32_t kMaxKeyDigestDim = 256;

}  // namespace kvtier::protocol
