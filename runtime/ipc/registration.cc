#include "runtime/ipc/registration.h"

#include "absl/strings/str_cat.h"
#include "runtime/common/client_text.h"

namespace kjit::ipc {
namespace {

std::string RegionName(const std::string& name) { return absl::StrCat("region '", ClientText(name), "'"); }

Status CheckName(const std::string& name, const char* what) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " name is empty"));
  if (name.size() > kMaxRegistrationNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " name '", ClientText(name), "' is longer than ",
                                                   kMaxRegistrationNameBytes, " bytes: use a shorter name"));
  }
  return absl::OkStatus();
}

Status CheckHandle(const std::string& raw_handle, const std::string& what, const char* type) {
  if (raw_handle.size() != kIpcHandleBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": raw_handle must be exactly ", kIpcHandleBytes,
                                                   " bytes (a ", type, "), got ", raw_handle.size()));
  }
  return absl::OkStatus();
}

// Before anything is mapped or opened (AddRegion checks again under its lock).
Status CheckRegionFree(const RegionRegistry& registry, const std::string& owner, const std::string& name) {
  if (registry.HasRegion(owner, name)) {
    return absl::AlreadyExistsError(absl::StrCat("shared memory ", RegionName(name), " is already registered"));
  }
  return absl::OkStatus();
}

}  // namespace

Status RegisterSystemRegion(RegionRegistry* registry, const std::string& name, const std::string& key,
                            uint64_t offset, uint64_t byte_size, const Registrant& who) {
  KJIT_RETURN_IF_ERROR(CheckName(name, "region"));
  KJIT_RETURN_IF_ERROR(CheckRegionFree(*registry, who.scope.owner, name));  // before mapping anything
  // The cap is checked before mapping (and again, under the registry's lock, by AddRegion).
  const uint64_t room = registry->SystemRoom();
  auto shm = SystemShmRegion::Open(key, offset, byte_size, who.peer ? &*who.peer : nullptr, room,
                                   absl::StrCat("kjitd may map ", room, " more bytes of system shared memory "
                                                "regions (--max-system-shm-bytes ", registry->max_system_bytes(),
                                                "): unregister some, or register smaller windows"));
  if (!shm.ok()) return WithContext(shm.status(), RegionName(name));
  auto region = std::make_shared<Region>();
  region->name = name;
  region->session = who.scope.session;
  region->owner = who.scope.owner;
  region->system = *std::move(shm);
  return registry->AddRegion(std::move(region), who.session_open);
}

Status RegisterCudaRegion(RegionRegistry* registry, const std::string& name, const std::string& raw_handle,
                          int64_t device_id, uint64_t byte_size, const DeviceResolver& device,
                          const Registrant& who) {
  KJIT_RETURN_IF_ERROR(CheckName(name, "region"));
  KJIT_RETURN_IF_ERROR(CheckHandle(raw_handle, RegionName(name), "cudaIpcMemHandle_t"));
  if (byte_size == 0) return absl::InvalidArgumentError(absl::StrCat(RegionName(name), ": byte_size is 0"));
  KJIT_ASSIGN_OR_RETURN(const driver::Context* ctx, device(device_id));
  KJIT_RETURN_IF_ERROR(CheckRegionFree(*registry, who.scope.owner, name));
  KJIT_RETURN_IF_ERROR(ctx->MakeCurrent());
  auto cuda = CudaIpcRegion::Open(raw_handle, static_cast<int>(device_id), byte_size);
  if (!cuda.ok()) return WithContext(cuda.status(), RegionName(name));
  auto region = std::make_shared<Region>();
  region->name = name;
  region->session = who.scope.session;
  region->owner = who.scope.owner;
  region->cuda = *std::move(cuda);
  // A concurrent register of the same name loses here; its handle closes with `region`.
  return registry->AddRegion(std::move(region), who.session_open);
}

Status RegisterEvent(RegionRegistry* registry, const std::string& name, const std::string& raw_handle,
                     int64_t device_id, const DeviceResolver& device, const Registrant& who) {
  const std::string what = absl::StrCat("event '", ClientText(name), "'");
  KJIT_RETURN_IF_ERROR(CheckName(name, "event"));
  KJIT_RETURN_IF_ERROR(CheckHandle(raw_handle, what, "cudaIpcEventHandle_t"));
  KJIT_ASSIGN_OR_RETURN(const driver::Context* ctx, device(device_id));
  if (registry->HasEvent(who.scope.owner, name))
    return absl::AlreadyExistsError(absl::StrCat(what, " is already registered"));
  KJIT_RETURN_IF_ERROR(ctx->MakeCurrent());
  auto ev = CudaIpcEvent::Open(raw_handle, static_cast<int>(device_id));
  if (!ev.ok()) return WithContext(ev.status(), what);
  auto named = std::make_shared<NamedEvent>();
  named->name = name;
  named->session = who.scope.session;
  named->owner = who.scope.owner;
  named->event = *std::move(ev);
  return registry->AddEvent(std::move(named), who.session_open);
}

}  // namespace kjit::ipc
