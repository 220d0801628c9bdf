#include "runtime/ipc/region_registry.h"

#include "runtime/common/client_text.h"

namespace kjit::ipc {
namespace {

Status CheckSession(const std::string& session, const RegionRegistry::SessionOpen& session_open) {
  if (session.empty() || !session_open || session_open(session)) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("session '", ClientText(session), "' has ended"));
}

// Unseen entries read as unregistered (another user's are not even looked at: names are per
// identity); an entry of the caller's identity in another session is pointed at the request's
// session.
std::string Unseen(const char* what, const std::string& name, const std::string& session) {
  return absl::StrCat(what, " '", ClientText(name), "' is not registered",
                      session.empty() ? "" : " in this request's session (kjit-session)");
}

}  // namespace

bool RegionRegistry::Sees(const Scope& viewer, const std::string& session, const std::string& owner) {
  return session.empty() ? owner == viewer.owner : session == viewer.session;
}

void RegionRegistry::SetMaxEntries(size_t max_entries) {
  std::lock_guard<std::mutex> lock(mu_);
  max_entries_ = max_entries;
}

Status RegionRegistry::CheckRoomLocked(const std::string& owner) const {
  constexpr char kAdvice[] = "unregister some, or register one region per allocation rather than per tensor";
  if (regions_.size() + events_.size() >= max_entries_) {
    return absl::ResourceExhaustedError(absl::StrCat("kjitd holds ", max_entries_,
                                                     " registered regions and events, its limit (--max-regions): ", kAdvice));
  }
  if (owner.empty()) return absl::OkStatus();
  size_t mine = 0;
  for (const auto& [n, r] : regions_) mine += r->owner == owner;
  for (const auto& [n, e] : events_) mine += e->owner == owner;
  if (mine < IdentityShare(max_entries_)) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat("this client's user holds ", mine, " registered regions and events, ",
                                                   IdentityShareText(max_entries_, "--max-regions"), ": ", kAdvice));
}

void RegionRegistry::SetMaxSystemBytes(uint64_t max_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  max_system_bytes_ = max_bytes;
}

Status RegionRegistry::CheckSystemRoomLocked(uint64_t bytes, const std::string& owner) const {
  constexpr char kAdvice[] = "unregister some, or register smaller windows";
  if (bytes > max_system_bytes_ || system_bytes_ > max_system_bytes_ - bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("kjitd holds ", system_bytes_,
                                                     " bytes of system shared memory regions; ", bytes,
                                                     " more would pass its limit of ", max_system_bytes_,
                                                     " (--max-system-shm-bytes): ", kAdvice));
  }
  if (owner.empty()) return absl::OkStatus();
  uint64_t mine = 0;
  for (const auto& [n, r] : regions_) mine += r->owner == owner && r->system ? r->system->size() : 0;
  const uint64_t share = IdentityShare(max_system_bytes_);
  if (bytes <= share && mine <= share - bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "this client's user holds ", mine, " bytes of system shared memory regions; ", bytes, " more would pass ",
      IdentityShareText(max_system_bytes_, "--max-system-shm-bytes"), ": ", kAdvice));
}

uint64_t RegionRegistry::SystemRoom() const {
  std::lock_guard<std::mutex> lock(mu_);
  return system_bytes_ <= max_system_bytes_ ? max_system_bytes_ - system_bytes_ : 0;
}

Status RegionRegistry::CheckSystemRoom(uint64_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  return CheckSystemRoomLocked(bytes, "");
}

void RegionRegistry::ForgetLocked(const Region& region) {
  if (region.system) system_bytes_ -= region.system->size();
  removals_.fetch_add(1, std::memory_order_release);
}

Status RegionRegistry::AddRegion(std::shared_ptr<const Region> region, const SessionOpen& session_open) {
  std::lock_guard<std::mutex> lock(mu_);
  KJIT_RETURN_IF_ERROR(CheckSession(region->session, session_open));
  if (regions_.count(Key(region->owner, region->name)) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("shared memory region '", ClientText(region->name), "' is already registered"));
  }
  KJIT_RETURN_IF_ERROR(CheckRoomLocked(region->owner));
  if (region->system) {
    KJIT_RETURN_IF_ERROR(CheckSystemRoomLocked(region->system->size(), region->owner));
    system_bytes_ += region->system->size();
  }
  Key key(region->owner, region->name);
  regions_.emplace(std::move(key), std::move(region));
  return absl::OkStatus();
}

bool RegionRegistry::HasRegion(const std::string& owner, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return regions_.count(Key(owner, name)) != 0;
}

void RegionRegistry::RemoveRegion(RegionKind kind, const std::string& name, const Scope& session) {
  std::vector<std::shared_ptr<const Region>> dropped;  // released outside the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = regions_.begin(); it != regions_.end();) {
      if (it->second->kind() == kind && (name.empty() || it->second->name == name) &&
          Sees(session, it->second->session, it->second->owner)) {
        ForgetLocked(*it->second);
        dropped.push_back(std::move(it->second));
        it = regions_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

StatusOr<std::shared_ptr<const Region>> RegionRegistry::FindRegion(const std::string& name,
                                                                   const Scope& session) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(Key(session.owner, name));
  if (it == regions_.end() || !Sees(session, it->second->session, it->second->owner)) {
    return absl::NotFoundError(
        Unseen("shared memory region", name, it == regions_.end() ? "" : it->second->session));
  }
  return it->second;
}

StatusOr<std::vector<std::shared_ptr<const Region>>> RegionRegistry::ListRegions(
    RegionKind kind, const std::string& name, const Scope& session) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<const Region>> out;
  for (const auto& [key, r] : regions_) {
    if (r->kind() == kind && (name.empty() || r->name == name) && Sees(session, r->session, r->owner)) out.push_back(r);
  }
  if (!name.empty() && out.empty()) {
    return absl::NotFoundError(absl::StrCat(kind == RegionKind::kCuda ? "CUDA" : "system",
                                            " shared memory region '", ClientText(name), "' is not registered"));
  }
  return out;
}

Status RegionRegistry::AddEvent(std::shared_ptr<const NamedEvent> event, const SessionOpen& session_open) {
  std::lock_guard<std::mutex> lock(mu_);
  KJIT_RETURN_IF_ERROR(CheckSession(event->session, session_open));
  if (events_.count(Key(event->owner, event->name)) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("event '", ClientText(event->name), "' is already registered"));
  }
  KJIT_RETURN_IF_ERROR(CheckRoomLocked(event->owner));
  Key key(event->owner, event->name);
  events_.emplace(std::move(key), std::move(event));
  return absl::OkStatus();
}

bool RegionRegistry::HasEvent(const std::string& owner, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.count(Key(owner, name)) != 0;
}

void RegionRegistry::RemoveEvent(const std::string& name, const Scope& session) {
  std::shared_ptr<const NamedEvent> dropped;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = events_.find(Key(session.owner, name));
  if (it == events_.end() || !Sees(session, it->second->session, it->second->owner)) return;
  dropped = std::move(it->second);
  events_.erase(it);
}

StatusOr<std::shared_ptr<const NamedEvent>> RegionRegistry::FindEvent(const std::string& name,
                                                                      const Scope& session) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = events_.find(Key(session.owner, name));
  if (it == events_.end() || !Sees(session, it->second->session, it->second->owner)) {
    return absl::NotFoundError(Unseen("event", name, it == events_.end() ? "" : it->second->session));
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
        ForgetLocked(*it->second);
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

RegionRegistry::Counts RegionRegistry::Count() const {
  std::lock_guard<std::mutex> lock(mu_);
  Counts c;
  for (const auto& [name, r] : regions_) ++(r->kind() == RegionKind::kCuda ? c.cuda_regions : c.system_regions);
  c.events = events_.size();
  return c;
}

void RegionRegistry::Clear() {
  std::map<Key, std::shared_ptr<const Region>> regions;
  std::map<Key, std::shared_ptr<const NamedEvent>> events;
  std::lock_guard<std::mutex> lock(mu_);
  regions.swap(regions_);
  events.swap(events_);
  system_bytes_ = 0;
  removals_.fetch_add(1, std::memory_order_release);
}

}  // namespace kjit::ipc
