// A window [offset, offset + byte_size) of a POSIX shared memory object, mapped read-write into the
// daemon (Boost.Interprocess). Bounds come from the object's real size, with overflow checks.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/interprocess/mapped_region.hpp>

#include "runtime/common/status.h"

namespace kjit::ipc {

// The identity of the process a registration is made for (from the Unix socket's SO_PEERCRED and
// SO_PEERGROUPS).
struct PeerCredentials {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary
};

// OK when a process with `peer`'s credentials could itself open an object with `st`'s owner and
// mode for reading and writing (the kernel's owner / group / other rule; uid 0 always may);
// PERMISSION_DENIED naming `what` otherwise. The daemon opens objects with its own rights, so a
// registration is allowed only when the client could have mapped the object itself: a client
// cannot make the daemon read another user's memory for it. An object with a POSIX access ACL
// (`has_acl`) may be registered only by its owner (and root): its named entries can deny a user
// what the mode bits allow, and kjitd does not evaluate ACLs.
Status PeerMayOpenReadWrite(const PeerCredentials& peer, const struct stat& st, const std::string& what,
                            bool has_acl = false);

class SystemShmRegion {
 public:
  // NOT_FOUND when no object has that key; INVALID_ARGUMENT for an empty or malformed key, a
  // zero byte_size, an object that is not a regular file, or a window outside the object;
  // PERMISSION_DENIED when `as` is given and PeerMayOpenReadWrite refuses (checked on the opened
  // object, so a rename in between cannot swap it); RESOURCE_EXHAUSTED for a valid window larger
  // than `room` (the bytes the caller may still map; checked before mapping, with `room_what`
  // saying what limits it).
  static StatusOr<std::unique_ptr<SystemShmRegion>> Open(const std::string& key, uint64_t offset,
                                                         uint64_t byte_size, const PeerCredentials* as = nullptr,
                                                         uint64_t room = UINT64_MAX,
                                                         const std::string& room_what = "");

  uint8_t* data() const { return static_cast<uint8_t*>(map_.get_address()); }
  uint64_t size() const { return byte_size_; }
  const std::string& key() const { return key_; }
  uint64_t offset() const { return offset_; }
  // Whether [offset, offset + bytes) of this window and [other_offset, other_offset + other_bytes) of
  // `other`'s are bytes of the same object (the same device and inode, whatever the keys: a key may
  // be unlinked and another object created under it, or one object be registered under many names).
  bool SharesBytesWith(uint64_t bytes, const SystemShmRegion& other, uint64_t other_bytes) const;
  // Whether users other than the client could write the object when it was registered: it had an
  // ACL, group or other write permission, or an owner other than the client (for a client without
  // credentials, a TCP one: other than kjitd's own user). A launch ring refuses such memory: whoever
  // writes a ring's bytes runs launches as the client that opened it.
  bool others_may_write() const { return others_may_write_; }

 private:
  SystemShmRegion(std::string key, uint64_t offset, uint64_t byte_size, dev_t dev, ino_t ino, bool others_may_write,
                  boost::interprocess::mapped_region map)
      : key_(std::move(key)),
        offset_(offset),
        byte_size_(byte_size),
        dev_(dev),
        ino_(ino),
        others_may_write_(others_may_write),
        map_(std::move(map)) {}
  std::string key_;
  uint64_t offset_;
  uint64_t byte_size_;
  dev_t dev_;
  ino_t ino_;
  bool others_may_write_;
  boost::interprocess::mapped_region map_;
};

}  // namespace kjit::ipc
