// Control-protocol version and the compatibility rule both peers apply at the door.
//
// The client sends its version in Hello; the daemon answers Welcome when compatible and
// VersionMismatch (then closes) otherwise. Same major = compatible: Cap'n Proto's evolution
// rules (see protocol/schema/control.capnp) make additive minor changes safe in both directions.
// The shm layout version and fingerprint travel alongside but are owned and compared by shm/.
// Thread-safety: constants and pure functions only.
#pragma once

#include <cstdint>
#include <string>

namespace kvtier::protocol {

inline constexpr std::uint16_t kProtocolMajor = 1, kProtocolMinor = 7;

// The Cap'n Proto file id of protocol/schema/control.capnp (fixed forever; a test pins it).
inline constexpr std::uint64_t kControlSchemaFileId = 0xd427c4b726ccb806ULL;

struct ProtocolVersion {
  std::uint16_t major = 0;
  std::uint16_t minor = 0;
};

inline constexpr ProtocolVersion kProtocolVersion{kProtocolMajor, kProtocolMinor};

// True when a peer speaking `theirs` can talk to one speaking `ours`: same major, any minor.
constexpr bool is_compatible(ProtocolVersion ours, ProtocolVersion theirs) noexcept {
  return ours.major == theirs.major;
}

// Same rule against this build's version.
constexpr bool is_compatible(ProtocolVersion theirs) noexcept {
  return is_compatible(kProtocolVersion, theirs);
}

// "1.0", for logs and VersionMismatch messages.
inline std::string to_string(ProtocolVersion version) {
  return std::to_string(version.major) + "." + std::to_string(version.minor);
}

}  // namespace kvtier::protocol
