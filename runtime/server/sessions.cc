#include "runtime/server/sessions.h"

#include <unistd.h>

#include <chrono>

namespace kjit::server {

std::string SessionTable::Open(const std::string& client_name, grpc::ServerContext* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  // pid + start time + counter: unique within and across daemon lifetimes.
  static const long long start =
      std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::system_clock::now().time_since_epoch()).count();
  std::string id = absl::StrCat("s", getpid(), "-", start % 1000000000, "-", next_++);
  open_.emplace(id, Entry{client_name, ctx});
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

StatusOr<std::string> SessionTable::SessionOf(const grpc::ServerContext& ctx) const {
  const auto& md = ctx.client_metadata();
  auto it = md.find(kSessionMetadataKey);
  if (it == md.end()) return std::string();
  std::string id(it->second.data(), it->second.size());
  std::lock_guard<std::mutex> lock(mu_);
  if (open_.count(id) == 0) {
    return absl::NotFoundError(absl::StrCat("session '", id, "' is not open"));
  }
  return id;
}

Status CheckDeviceUuid(const grpc::ServerContext& ctx, const std::string& what, int device_id,
                       const std::string& device_uuid) {
  const auto& md = ctx.client_metadata();
  auto it = md.find(kDeviceUuidMetadataKey);
  if (it == md.end()) return absl::OkStatus();
  const std::string claimed(it->second.data(), it->second.size());
  if (claimed == device_uuid) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": the client's GPU is ", claimed, " but device_id ", device_id, " is the daemon's GPU ",
      device_uuid, "; device_id is an ordinal in the daemon's GPU numbering (nvidia-smi -L), not the "
      "client's: check the client's CUDA_VISIBLE_DEVICES"));
}

bool SessionTable::IsOpen(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_.count(id) != 0;
}

}  // namespace kjit::server
