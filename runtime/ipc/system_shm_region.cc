#include "runtime/ipc/system_shm_region.h"

#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/shared_memory_object.hpp>

#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <string_view>

#include "runtime/common/client_text.h"
#include "runtime/driver/cuda_driver.h"

namespace kjit::ipc {

namespace bip = boost::interprocess;

Status PeerMayOpenReadWrite(const PeerCredentials& peer, const struct stat& st, const std::string& what,
                            bool has_acl) {
  if (peer.uid == 0) return absl::OkStatus();
  if (has_acl && st.st_uid != peer.uid) {
    return absl::PermissionDeniedError(absl::StrCat(
        what, " (owner uid ", st.st_uid, ") has a POSIX ACL, which kjitd does not evaluate: only its owner may "
        "register it, and the client is uid ", peer.uid, "; register it as its owner or remove the ACL"));
  }
  mode_t need;
  const char* as;
  if (st.st_uid == peer.uid) {
    need = S_IRUSR | S_IWUSR;
    as = "its owner";
  } else if (st.st_gid == peer.gid ||
             std::find(peer.groups.begin(), peer.groups.end(), st.st_gid) != peer.groups.end()) {
    need = S_IRGRP | S_IWGRP;
    as = "a member of its group";
  } else {
    need = S_IROTH | S_IWOTH;
    as = "another user";
  }
  if ((st.st_mode & need) == need) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      what, " (owner uid ", st.st_uid, ", group ", st.st_gid, ", mode ", absl::Hex(st.st_mode & 07777),
      ") is not readable and writable by the client (uid ", peer.uid, ", ", as,
      "): kjitd maps only objects the client could map itself; create it as that user or grant it access"));
}

StatusOr<std::unique_ptr<SystemShmRegion>> SystemShmRegion::Open(const std::string& key,
                                                                  uint64_t offset,
                                                                  uint64_t byte_size,
                                                                  const PeerCredentials* as, uint64_t room,
                                                                  const std::string& room_what) {
  // POSIX names: one optional leading '/', then no other '/'.
  const std::string name = (!key.empty() && key[0] == '/') ? key.substr(1) : key;
  // shm_open takes a C string: a NUL byte would silently name another object.
  if (name.empty() || name.size() > 250 || name.find_first_of(std::string_view("/\0", 2)) != std::string::npos ||
      name == "." || name == "..") {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory key '", ClientText(key),
        "' is not a valid POSIX name: an optional leading '/', then 1 to 250 bytes with no '/' and no NUL "
        "byte, and not '.' or '..'"));
  }
  const std::string what = absl::StrCat("shared memory key '", ClientText(key), "'");
  if (byte_size == 0) return absl::InvalidArgumentError(absl::StrCat(what, ": byte_size is 0"));
  try {
    // shm_open (under Boost) opens with O_NOFOLLOW: a symbolic link in /dev/shm is refused.
    bip::shared_memory_object shm(bip::open_only, name.c_str(), bip::read_write);
    struct stat st;
    if (fstat(shm.get_mapping_handle().handle, &st) != 0) {
      return absl::InternalError(absl::StrCat(what, ": cannot stat the object"));
    }
    if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(what, " is not a shared memory object"));
    // The size of the access ACL's extended attribute, or -1 (ENODATA) when there is none.
    const bool has_acl = fgetxattr(shm.get_mapping_handle().handle, "system.posix_acl_access", nullptr, 0) > 0;
    if (as != nullptr) KJIT_RETURN_IF_ERROR(PeerMayOpenReadWrite(*as, st, what, has_acl));
    // Who else may write it: an ACL (not evaluated), group or other write bits, or an owner who is
    // not the client (a TCP client: not kjitd's own user).
    const bool others_may_write =
        has_acl || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0 || st.st_uid != (as != nullptr ? as->uid : geteuid());
    bip::offset_t real = 0;
    if (!shm.get_size(real) || real < 0) {
      return absl::InternalError(absl::StrCat(what, ": cannot read its size"));
    }
    const uint64_t size = static_cast<uint64_t>(real);
    if (!driver::RangeInside(offset, byte_size, size)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": offset ", offset, " + byte_size ", byte_size,
                                                     " is outside the object's ", size, " bytes"));
    }
    if (byte_size > room) {
      return absl::ResourceExhaustedError(absl::StrCat(what, ": a window of ", byte_size, " bytes; ", room_what));
    }
    bip::mapped_region map(shm, bip::read_write, static_cast<bip::offset_t>(offset),
                           static_cast<size_t>(byte_size));
    return std::unique_ptr<SystemShmRegion>(
        new SystemShmRegion(key, offset, byte_size, st.st_dev, st.st_ino, others_may_write, std::move(map)));
  } catch (const bip::interprocess_exception& e) {
    if (e.get_error_code() == bip::not_found_error) {
      return absl::NotFoundError(absl::StrCat(what, " does not exist"));
    }
    const bip::error_code_t code = e.get_error_code();
    if (code == bip::out_of_space_error || code == bip::out_of_memory_error || code == bip::out_of_resource_error) {
      return absl::ResourceExhaustedError(absl::StrCat(what, ": kjitd cannot map it (", e.what(),
                                                       "): too many regions or files are open"));
    }
    if (code == bip::security_error) {
      return absl::PermissionDeniedError(absl::StrCat(what, ": kjitd's user may not open it (", e.what(), ")"));
    }
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", e.what()));
  }
}

bool SystemShmRegion::SharesBytesWith(uint64_t bytes, const SystemShmRegion& other, uint64_t other_bytes) const {
  if (dev_ != other.dev_ || ino_ != other.ino_) return false;
  // Both windows lie inside one object, so neither end overflows.
  return offset_ < other.offset_ + other_bytes && other.offset_ < offset_ + bytes;
}

}  // namespace kjit::ipc
