// Registering a client's memory and events: one function per kind holds every check (as Triton's
// shared memory manager keeps them together), so no transport can skip one. The caller resolves the
// session and the device; these check names, handles and sizes, open the object, and add it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "runtime/common/status.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/ipc/region_registry.h"

namespace kjit::ipc {

// Who registers, and until when.
struct Registrant {
  Scope scope;                              // its session ("" outside one) and identity
  RegionRegistry::SessionOpen session_open;  // asked under the registry's lock (see AddRegion)
  // The client's identity: system shared memory objects must be ones it may open itself
  // (PeerMayOpenReadWrite). Unset: the daemon's own rights decide (the caller has allowed that).
  std::optional<PeerCredentials> peer;
};

// The context of the GPU a registration names (device_id in the daemon's numbering), or why it
// cannot be used; called after the request's own checks.
using DeviceResolver = std::function<StatusOr<const driver::Context*>(int64_t device_id)>;

// The longest region or event name: the registry keeps each name and the status replies list them,
// so their bytes are bounded by the entry cap (a client's 128 MiB names could otherwise grow a status
// reply past what protobuf can serialize).
inline constexpr size_t kMaxRegistrationNameBytes = 256;

// A POSIX shared memory window [offset, offset + byte_size) of the object `key`. INVALID_ARGUMENT
// for an empty or too long name, a malformed key or a window outside the object; NOT_FOUND for no such
// object; ALREADY_EXISTS for a name taken by a region of either kind; PERMISSION_DENIED for an
// object `who.peer` may not open; RESOURCE_EXHAUSTED when the registry or the address space is full.
Status RegisterSystemRegion(RegionRegistry* registry, const std::string& name, const std::string& key,
                            uint64_t offset, uint64_t byte_size, const Registrant& who);

// A CUDA allocation shared by its 64-byte IPC handle, on GPU device_id. byte_size must be > 0 and
// fit the allocation from its base. INVALID_ARGUMENT for an empty or too long name, a handle that is
// not 64 bytes or does not open, a bad size; ALREADY_EXISTS as above; the resolver's errors.
Status RegisterCudaRegion(RegionRegistry* registry, const std::string& name, const std::string& raw_handle,
                          int64_t device_id, uint64_t byte_size, const DeviceResolver& device,
                          const Registrant& who);

// A CUDA event shared by its 64-byte IPC handle, on GPU device_id. INVALID_ARGUMENT for an empty
// or too long name or a bad handle; ALREADY_EXISTS for a name taken by an event; the resolver's errors.
Status RegisterEvent(RegionRegistry* registry, const std::string& name, const std::string& raw_handle,
                     int64_t device_id, const DeviceResolver& device, const Registrant& who);

}  // namespace kjit::ipc
