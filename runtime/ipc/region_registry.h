// Named shared-memory regions (system and CUDA share one name space) and named IPC events, with
// the session each was registered under. Lookups hand out shared references: a launch holds its
// regions for its whole duration, so an unregister during a launch takes effect after it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/ipc/cuda_ipc.h"
#include "runtime/ipc/system_shm_region.h"

namespace kjit::ipc {

enum class RegionKind { kSystem, kCuda };

struct Region {
  std::string name;
  std::string session;  // "" when registered outside a session
  std::unique_ptr<SystemShmRegion> system;  // exactly one of system / cuda is set
  std::unique_ptr<CudaIpcRegion> cuda;

  RegionKind kind() const { return cuda ? RegionKind::kCuda : RegionKind::kSystem; }
  uint64_t size() const { return cuda ? cuda->size() : system->size(); }
};

struct NamedEvent {
  std::string name;
  std::string session;
  std::unique_ptr<CudaIpcEvent> event;
};

class RegionRegistry {
 public:
  // Whether a session may still own new entries. The owner closes a session before calling
  // ReleaseSession, and AddRegion/AddEvent ask this under the registry's lock: an entry is either
  // refused (NOT_FOUND) or in place before the release runs, so none outlives its session.
  using SessionOpen = std::function<bool(const std::string& session)>;

  // ALREADY_EXISTS when the name is taken by a region of either kind; NOT_FOUND when the region
  // names a session that session_open (if given) says has ended.
  Status AddRegion(std::shared_ptr<const Region> region, const SessionOpen& session_open = {});
  // Removes the named region of that kind; an empty name removes every region of the kind; an
  // unknown name (or one of the other kind) is not an error.
  void RemoveRegion(RegionKind kind, const std::string& name);
  // NOT_FOUND for an unknown name.
  StatusOr<std::shared_ptr<const Region>> FindRegion(const std::string& name) const;
  // Regions of one kind, by name; with a name, that region only (NOT_FOUND when unknown).
  StatusOr<std::vector<std::shared_ptr<const Region>>> ListRegions(RegionKind kind,
                                                                   const std::string& name) const;

  // ALREADY_EXISTS when taken; NOT_FOUND as AddRegion.
  Status AddEvent(std::shared_ptr<const NamedEvent> event, const SessionOpen& session_open = {});
  void RemoveEvent(const std::string& name);                  // unknown: no error
  StatusOr<std::shared_ptr<const NamedEvent>> FindEvent(const std::string& name) const;

  // Drops everything registered under the session; returns how many regions and events it held.
  size_t ReleaseSession(const std::string& session);
  // Drops everything (daemon exit).
  void Clear();

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const Region>> regions_;
  std::map<std::string, std::shared_ptr<const NamedEvent>> events_;
};

}  // namespace kjit::ipc
