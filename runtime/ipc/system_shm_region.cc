#include "runtime/ipc/system_shm_region.h"

#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/shared_memory_object.hpp>

#include "runtime/driver/cuda_driver.h"

namespace kjit::ipc {

namespace bip = boost::interprocess;

StatusOr<std::unique_ptr<SystemShmRegion>> SystemShmRegion::Open(const std::string& key,
                                                                  uint64_t offset,
                                                                  uint64_t byte_size) {
  // POSIX names: one optional leading '/', then no other '/'.
  const std::string name = (!key.empty() && key[0] == '/') ? key.substr(1) : key;
  if (name.empty() || name.find('/') != std::string::npos || name.size() > 250) {
    return absl::InvalidArgumentError(absl::StrCat("shared memory key '", key, "' is not a valid POSIX name"));
  }
  if (byte_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat("shared memory key '", key, "': byte_size is 0"));
  }
  try {
    bip::shared_memory_object shm(bip::open_only, name.c_str(), bip::read_write);
    bip::offset_t real = 0;
    if (!shm.get_size(real) || real < 0) {
      return absl::InternalError(absl::StrCat("shared memory key '", key, "': cannot read its size"));
    }
    const uint64_t size = static_cast<uint64_t>(real);
    if (!driver::RangeInside(offset, byte_size, size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shared memory key '", key, "': offset ", offset, " + byte_size ", byte_size,
          " is outside the object's ", size, " bytes"));
    }
    bip::mapped_region map(shm, bip::read_write, static_cast<bip::offset_t>(offset),
                           static_cast<size_t>(byte_size));
    return std::unique_ptr<SystemShmRegion>(
        new SystemShmRegion(key, offset, byte_size, std::move(map)));
  } catch (const bip::interprocess_exception& e) {
    if (e.get_error_code() == bip::not_found_error) {
      return absl::NotFoundError(absl::StrCat("shared memory key '", key, "' does not exist"));
    }
    return absl::InvalidArgumentError(absl::StrCat("shared memory key '", key, "': ", e.what()));
  }
}

}  // namespace kjit::ipc
