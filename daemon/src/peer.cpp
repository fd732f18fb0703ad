#include "peer.hpp"

#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

namespace kvtier::daemon {

Result<PeerCredentials> peer_credentials(int socket_fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(socket_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return os_error("SO_PEERCRED");
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

bool peer_is_admin(const PeerCredentials& peer, const std::string& admin_group) {
  if (peer.uid == 0 || peer.uid == ::geteuid()) return true;
  if (admin_group.empty()) return false;
  group grp{};
  group* grp_result = nullptr;
  std::vector<char> buf(16384);
  if (::getgrnam_r(admin_group.c_str(), &grp, buf.data(), buf.size(), &grp_result) != 0 || grp_result == nullptr) {
    return false;
  }
  if (peer.gid == grp.gr_gid) return true;
  passwd pw{};
  passwd* pw_result = nullptr;
  std::vector<char> pwbuf(16384);
  if (::getpwuid_r(peer.uid, &pw, pwbuf.data(), pwbuf.size(), &pw_result) != 0 || pw_result == nullptr) return false;
  int count = 64;
  std::vector<gid_t> groups(static_cast<std::size_t>(count));
  if (::getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &count) < 0) {
    groups.resize(static_cast<std::size_t>(count));
    if (::getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &count) < 0) return false;
  }
  for (int i = 0; i < count; ++i) {
    if (groups[static_cast<std::size_t>(i)] == grp.gr_gid) return true;
  }
  return false;
}

}  // namespace kvtier::daemon
