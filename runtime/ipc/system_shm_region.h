// A window [offset, offset + byte_size) of a POSIX shared memory object, mapped read-write into the
// daemon (Boost.Interprocess). Bounds come from the object's real size, with overflow checks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <boost/interprocess/mapped_region.hpp>

#include "runtime/common/status.h"

namespace kjit::ipc {

class SystemShmRegion {
 public:
  // NOT_FOUND when no object has that key; INVALID_ARGUMENT for an empty or malformed key, a
  // zero byte_size, or a window outside the object.
  static StatusOr<std::unique_ptr<SystemShmRegion>> Open(const std::string& key, uint64_t offset,
                                                         uint64_t byte_size);

  uint8_t* data() const { return static_cast<uint8_t*>(map_.get_address()); }
  uint64_t size() const { return byte_size_; }
  const std::string& key() const { return key_; }
  uint64_t offset() const { return offset_; }

 private:
  SystemShmRegion(std::string key, uint64_t offset, uint64_t byte_size,
                  boost::interprocess::mapped_region map)
      : key_(std::move(key)), offset_(offset), byte_size_(byte_size), map_(std::move(map)) {}
  std::string key_;
  uint64_t offset_;
  uint64_t byte_size_;
  boost::interprocess::mapped_region map_;
};

}  // namespace kjit::ipc
