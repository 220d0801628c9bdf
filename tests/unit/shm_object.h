// Test helper: a POSIX shared memory object of a given size, created exclusively under a unique
// key, mapped read-write, unmapped and unlinked on destruction (also when a test fails midway).
// Resize plays a client that truncates (or grows) its object under a registration.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace kjit::testing {

class ShmObject {
 public:
  explicit ShmObject(size_t size)
      : key_("/kjit-test-shm-" + std::to_string(getpid()) + "-" + std::to_string(counter_++)), size_(size) {
    const int fd = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd, 0) << key_;
    if (fd < 0) return;
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
    void* map = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    EXPECT_NE(map, MAP_FAILED);
    if (map != MAP_FAILED) map_ = static_cast<uint8_t*>(map);
  }
  ~ShmObject() {
    if (map_ != nullptr) munmap(map_, size_);
    shm_unlink(key_.c_str());
  }
  ShmObject(const ShmObject&) = delete;
  ShmObject& operator=(const ShmObject&) = delete;

  const std::string& key() const { return key_; }
  // The object's new size; the mapping stays (its pages past the new end fault on access).
  void Resize(size_t size) {
    const int fd = shm_open(key_.c_str(), O_RDWR, 0600);
    EXPECT_GE(fd, 0) << key_;
    if (fd < 0) return;
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
    close(fd);
  }
  uint8_t* map() const { return map_; }  // null when creation failed (the test has failed already)

 private:
  static inline int counter_ = 0;
  std::string key_;
  size_t size_ = 0;
  uint8_t* map_ = nullptr;
};

}  // namespace kjit::testing
