// A POSIX shared memory object the fuzz harnesses own: created at start, unlinked as soon as the
// harness has opened what it needs (Unlink; libFuzzer exits without running the destructors of the
// harnesses' static worlds, which left one object in /dev/shm per run), and unmapped at exit.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace kjit::fuzz {

class ShmObject {
 public:
  explicit ShmObject(size_t size) : size_(size) {
    key_ = "/kjit-fuzz-" + std::to_string(getpid()) + "-" + std::to_string(next_++);
    const int fd = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) __builtin_trap();
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) __builtin_trap();
    data_ = static_cast<uint8_t*>(p);
  }
  ~ShmObject() {
    munmap(data_, size_);
    Unlink();
  }
  // The name goes; the mappings (this one, and those opened by key before) stay.
  void Unlink() {
    if (!linked_) return;
    shm_unlink(key_.c_str());
    linked_ = false;
  }
  const std::string& key() const { return key_; }
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  static inline int next_ = 0;
  std::string key_;
  size_t size_;
  uint8_t* data_ = nullptr;
  bool linked_ = true;
};

}  // namespace kjit::fuzz
