// Named shared-memory regions (system and CUDA share one name space) and named IPC events, with
// the session each was registered under. Lookups hand out shared references: a launch holds its
// regions for its whole duration, so an unregister during a launch takes effect after it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/ipc/cuda_ipc.h"
#include "runtime/ipc/scope.h"
#include "runtime/ipc/system_shm_region.h"

namespace kjit::ipc {

enum class RegionKind { kSystem, kCuda };

struct Region {
  std::string name;
  std::string session;  // "" when registered outside a session
  std::string owner;    // the registrant's identity (Scope::owner)
  std::unique_ptr<SystemShmRegion> system;  // exactly one of system / cuda is set
  std::unique_ptr<CudaIpcRegion> cuda;

  RegionKind kind() const { return cuda ? RegionKind::kCuda : RegionKind::kSystem; }
  uint64_t size() const { return cuda ? cuda->size() : system->size(); }
};

struct NamedEvent {
  std::string name;
  std::string session;
  std::string owner;
  std::unique_ptr<CudaIpcEvent> event;
};

// Visibility: an entry registered under a session is seen only by requests of that session (so a
// client cannot launch on, list, or unregister another session's memory by guessing its name); an
// entry registered outside any session is seen by requests of its registrant's identity (the same
// Unix user, or any TCP client: kjitd cannot tell TCP clients apart), in a session or not, so one
// user's regions and events are not another's to use, list or unregister. Names are per identity:
// each identity (every session of it, and outside any) has a name space of its own, so that one user
// can neither take a name before another (ALREADY_EXISTS) nor learn which names another uses.
class RegionRegistry {
 public:
  // An entry's place in its identity's name space: (owner, name).
  using Key = std::pair<std::string, std::string>;

  // At most `max_entries` regions and events together (each region is one mapping of the daemon's
  // address space, which the kernel caps at vm.max_map_count): RESOURCE_EXHAUSTED past it. An
  // identity (a Scope's owner) may hold IdentityShare of this, and of the bytes below (scope.h).
  static constexpr size_t kDefaultMaxEntries = 16384;
  void SetMaxEntries(size_t max_entries);
  // At most this many bytes of system shared memory registered at once (each region is mapped into
  // the daemon's address space for as long as it is registered; a sparse object costs no memory, so
  // without a cap a few registrations could take the whole address space): RESOURCE_EXHAUSTED past it.
  static constexpr uint64_t kDefaultMaxSystemBytes = uint64_t{64} << 30;
  void SetMaxSystemBytes(uint64_t max_bytes);
  uint64_t max_system_bytes() const { return max_system_bytes_; }
  // RESOURCE_EXHAUSTED when `bytes` more would pass the cap; the bytes that may still be
  // registered (both are checked again by AddRegion): before a region is mapped.
  Status CheckSystemRoom(uint64_t bytes) const;
  uint64_t SystemRoom() const;

  // Whether a session may still own new entries. The owner closes a session before calling
  // ReleaseSession, and AddRegion/AddEvent ask this under the registry's lock: an entry is either
  // refused (NOT_FOUND) or in place before the release runs, so none outlives its session.
  using SessionOpen = std::function<bool(const std::string& session)>;

  // ALREADY_EXISTS when the registrant's identity has a region of either kind by that name;
  // NOT_FOUND when the region names a session that session_open (if given) says has ended;
  // RESOURCE_EXHAUSTED past the cap.
  Status AddRegion(std::shared_ptr<const Region> region, const SessionOpen& session_open = {});
  // Whether `owner` (an identity) has a region by that name, in any session or none.
  bool HasRegion(const std::string& owner, const std::string& name) const;
  // Removes the named region of that kind that `session` sees; an empty name removes every region
  // of the kind it sees; an unknown or unseen name (or one of the other kind) is not an error.
  void RemoveRegion(RegionKind kind, const std::string& name, const Scope& session);
  // NOT_FOUND for a name `session` does not see.
  StatusOr<std::shared_ptr<const Region>> FindRegion(const std::string& name, const Scope& session) const;
  // Regions of one kind that `session` sees, by name; with a name, that region only (NOT_FOUND
  // when unseen).
  StatusOr<std::vector<std::shared_ptr<const Region>>> ListRegions(RegionKind kind, const std::string& name,
                                                                   const Scope& session) const;
  // Whether requests of `viewer` see an entry registered under `session` by `owner`.
  static bool Sees(const Scope& viewer, const std::string& session, const std::string& owner);

  // ALREADY_EXISTS when the registrant's identity has an event by that name; NOT_FOUND and
  // RESOURCE_EXHAUSTED as AddRegion.
  Status AddEvent(std::shared_ptr<const NamedEvent> event, const SessionOpen& session_open = {});
  bool HasEvent(const std::string& owner, const std::string& name) const;
  void RemoveEvent(const std::string& name, const Scope& session);  // unknown or unseen: no error
  StatusOr<std::shared_ptr<const NamedEvent>> FindEvent(const std::string& name, const Scope& session) const;

  // Drops everything registered under the session; returns how many regions and events it held.
  size_t ReleaseSession(const std::string& session);
  // Drops everything (daemon exit).
  void Clear();

  // How many of each are registered, whoever sees them (status and metrics).
  struct Counts {
    size_t system_regions = 0, cuda_regions = 0, events = 0;
  };
  Counts Count() const;
  size_t max_entries() const { return max_entries_; }
  // Changes whenever a region leaves the registry (unregistered, released with its session, or
  // cleared): a holder of a region that polls (a launch ring) looks it up again only then.
  uint64_t RemovalCount() const { return removals_.load(std::memory_order_acquire); }

 private:
  // Room for one more entry of `owner`, and for `bytes` more of its system shared memory: under the
  // limits, and under its IdentityShare of them (scope.h).
  Status CheckRoomLocked(const std::string& owner) const;
  Status CheckSystemRoomLocked(uint64_t bytes, const std::string& owner) const;
  void ForgetLocked(const Region& region);  // its bytes, when it leaves regions_
  size_t max_entries_ = kDefaultMaxEntries;
  uint64_t max_system_bytes_ = kDefaultMaxSystemBytes;
  uint64_t system_bytes_ = 0;  // of the system regions in regions_
  mutable std::mutex mu_;
  std::atomic<uint64_t> removals_{0};
  std::map<Key, std::shared_ptr<const Region>> regions_;
  std::map<Key, std::shared_ptr<const NamedEvent>> events_;
};

}  // namespace kjit::ipc
