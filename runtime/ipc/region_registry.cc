#include "runtime/ipc/region_registry.h"

namespace kjit::ipc {
namespace {

Status CheckSession(const std::string& session, const RegionRegistry::SessionOpen& session_open) {
  if (session.empty() || !session_open || session_open(session)) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("session '", session, "' has ended"));
}

}  // namespace

Status RegionRegistry::AddRegion(std::shared_ptr<const Region> region, const SessionOpen& session_open) {
  std::lock_guard<std::mutex> lock(mu_);
  KJIT_RETURN_IF_ERROR(CheckSession(region->session, session_open));
  if (regions_.count(region->name) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("shared memory region '", region->name, "' is already registered"));
  }
  regions_.emplace(region->name, std::move(region));
  return absl::OkStatus();
}

void RegionRegistry::RemoveRegion(RegionKind kind, const std::string& name) {
  std::vector<std::shared_ptr<const Region>> dropped;  // released outside the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = regions_.begin(); it != regions_.end();) {
      if (it->second->kind() == kind && (name.empty() || it->first == name)) {
        dropped.push_back(std::move(it->second));
        it = regions_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

StatusOr<std::shared_ptr<const Region>> RegionRegistry::FindRegion(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(name);
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat("shared memory region '", name, "' is not registered"));
  }
  return it->second;
}

StatusOr<std::vector<std::shared_ptr<const Region>>> RegionRegistry::ListRegions(
    RegionKind kind, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<const Region>> out;
  for (const auto& [n, r] : regions_) {
    if (r->kind() == kind && (name.empty() || n == name)) out.push_back(r);
  }
  if (!name.empty() && out.empty()) {
    return absl::NotFoundError(absl::StrCat(kind == RegionKind::kCuda ? "CUDA" : "system",
                                            " shared memory region '", name, "' is not registered"));
  }
  return out;
}

Status RegionRegistry::AddEvent(std::shared_ptr<const NamedEvent> event, const SessionOpen& session_open) {
  std::lock_guard<std::mutex> lock(mu_);
  KJIT_RETURN_IF_ERROR(CheckSession(event->session, session_open));
  if (events_.count(event->name) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("event '", event->name, "' is already registered"));
  }
  events_.emplace(event->name, std::move(event));
  return absl::OkStatus();
}

void RegionRegistry::RemoveEvent(const std::string& name) {
  std::shared_ptr<const NamedEvent> dropped;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = events_.find(name);
  if (it == events_.end()) return;
  dropped = std::move(it->second);
  events_.erase(it);
}

StatusOr<std::shared_ptr<const NamedEvent>> RegionRegistry::FindEvent(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = events_.find(name);
  if (it == events_.end()) {
    return absl::NotFoundError(absl::StrCat("event '", name, "' is not registered"));
  }
  return it->second;
}

size_t RegionRegistry::ReleaseSession(const std::string& session) {
  std::vector<std::shared_ptr<const Region>> regions;
  std::vector<std::shared_ptr<const NamedEvent>> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = regions_.begin(); it != regions_.end();) {
      if (it->second->session == session) {
        regions.push_back(std::move(it->second));
        it = regions_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = events_.begin(); it != events_.end();) {
      if (it->second->session == session) {
        events.push_back(std::move(it->second));
        it = events_.erase(it);
      } else {
        ++it;
      }
    }
  }
  return regions.size() + events.size();
}

void RegionRegistry::Clear() {
  std::map<std::string, std::shared_ptr<const Region>> regions;
  std::map<std::string, std::shared_ptr<const NamedEvent>> events;
  std::lock_guard<std::mutex> lock(mu_);
  regions.swap(regions_);
  events.swap(events_);
}

}  // namespace kjit::ipc
