#include "runtime/server/sessions.h"

#include <unistd.h>

#include <random>

#include "runtime/common/client_text.h"
#include "runtime/server/peer.h"

namespace kjit::server {
namespace {

// 128 random bits from the kernel's generator: a client cannot guess another client's session and
// register under it (the id a daemon once built from its pid, start time and a counter could be).
std::string RandomSessionId() {
  std::random_device rd;  // /dev/urandom
  std::string id = "s";
  for (int i = 0; i < 4; ++i) absl::StrAppend(&id, absl::Hex(rd(), absl::kZeroPad8));
  return id;
}

}  // namespace

void SessionTable::SetMaxSessions(size_t max_sessions) {
  std::lock_guard<std::mutex> lock(mu_);
  max_sessions_ = max_sessions;
}

StatusOr<std::string> SessionTable::Open(const std::string& client_name, grpc::ServerContext* ctx) {
  std::string id = RandomSessionId();
  std::string identity = PeerIdentity(*ctx);
  std::lock_guard<std::mutex> lock(mu_);
  if (open_.size() >= max_sessions_) {
    return absl::ResourceExhaustedError(absl::StrCat("kjitd has ", max_sessions_,
                                                     " open sessions, its limit (--max-sessions): close one first"));
  }
  if (!identity.empty()) {
    size_t mine = 0;
    for (const auto& [open_id, e] : open_) mine += e.identity == identity;
    if (mine >= ipc::IdentityShare(max_sessions_)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "this client's user has ", mine, " open sessions, ", ipc::IdentityShareText(max_sessions_, "--max-sessions"),
          ": close one first"));
    }
  }
  while (open_.count(id) != 0) id = RandomSessionId();
  open_.emplace(id, Entry{client_name, ctx, ctx->peer(), std::move(identity)});
  return id;
}

void SessionTable::Close(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  open_.erase(id);
}

void SessionTable::CancelAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, e] : open_) e.ctx->TryCancel();
}

StatusOr<ipc::Scope> SessionTable::ScopeOf(const grpc::ServerContext& ctx) const {
  const auto& md = ctx.client_metadata();
  auto it = md.find(kSessionMetadataKey);
  if (it == md.end()) return ipc::Scope("", PeerIdentity(ctx));
  std::string id(it->second.data(), it->second.size());
  std::lock_guard<std::mutex> lock(mu_);
  auto entry = open_.find(id);
  if (entry == open_.end() || entry->second.connection != ctx.peer()) {  // another connection's reads as unknown
    return absl::NotFoundError(absl::StrCat("session '", ClientText(id), "' is not open"));
  }
  return ipc::Scope(std::move(id), entry->second.identity);  // the same connection: the same peer
}

StatusOr<ipc::Registrant> SessionTable::RegistrantOf(const grpc::ServerContext& ctx) const {
  KJIT_ASSIGN_OR_RETURN(ipc::Scope scope, ScopeOf(ctx));
  return ipc::Registrant{std::move(scope), [this](const std::string& s) { return IsOpen(s); }, {}};
}

Status CheckDeviceUuid(const grpc::ServerContext& ctx, const std::string& what, int device_id,
                       const std::string& device_uuid) {
  const auto& md = ctx.client_metadata();
  auto it = md.find(kDeviceUuidMetadataKey);
  if (it == md.end()) return absl::OkStatus();
  const std::string claimed(it->second.data(), it->second.size());
  if (claimed == device_uuid) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": the client's GPU is ", ClientText(claimed), " but device_id ", device_id, " is the daemon's GPU ",
      device_uuid, "; device_id is an ordinal in the daemon's GPU numbering (nvidia-smi -L), not the "
      "client's: check the client's CUDA_VISIBLE_DEVICES"));
}

size_t SessionTable::Count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_.size();
}

bool SessionTable::IsOpen(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_.count(id) != 0;
}

}  // namespace kjit::server
