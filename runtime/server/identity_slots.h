// Slots of a limit that every client shares, of which one identity (PeerIdentity: a Unix user, or
// every TCP client together) holds at most ipc::IdentityShare; a caller without an identity ("") is
// held to the limit alone. Not synchronized: its owner calls it under its own lock.
#pragma once

#include <map>
#include <string>

#include "runtime/ipc/scope.h"

namespace kjit::server {

class IdentitySlots {
 public:
  explicit IdentitySlots(int limit) : limit_(limit) {}
  enum class Taken { kYes, kLimit, kShare };  // kLimit: every slot is held; kShare: the identity's share is
  Taken TryTake(const std::string& identity) {
    if (total_ >= limit_) return Taken::kLimit;
    if (!identity.empty() && static_cast<uint64_t>(Held(identity)) >= ipc::IdentityShare(limit_)) return Taken::kShare;
    ++by_identity_[identity];
    ++total_;
    return Taken::kYes;
  }
  void Give(const std::string& identity) {
    if (--by_identity_[identity] == 0) by_identity_.erase(identity);
    --total_;
  }
  int Held(const std::string& identity) const {
    const auto it = by_identity_.find(identity);
    return it == by_identity_.end() ? 0 : it->second;
  }
  int total() const { return total_; }
  int limit() const { return limit_; }

 private:
  int limit_;
  int total_ = 0;
  std::map<std::string, int> by_identity_;  // entries > 0 only
};

}  // namespace kjit::server
