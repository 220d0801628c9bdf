// Copies from and to a client's shared memory survive the client truncating the object: the
// SIGBUS of a page past the object's end becomes INVALID_ARGUMENT, and the copies work again once
// the object has its size back.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "runtime/ipc/sigbus_guard.h"
#include "runtime/ipc/system_shm_region.h"

namespace kjit::ipc {
namespace {

TEST(SigbusGuard, TruncatedObjectIsAnErrorNotACrash) {
  const std::string key = "/kjit-sigbus-test-" + std::to_string(getpid());
  const int fd = shm_open(key.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  const size_t size = 3 * 4096 + 100;  // not a whole number of pages
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
  auto region = SystemShmRegion::Open(key, 0, size);
  ASSERT_TRUE(region.ok()) << region.status();
  uint8_t* map = (*region)->data();

  std::vector<uint8_t> host(size, 0x5a);
  ASSERT_TRUE(GuardedCopy(map, host.data(), size, "region 'r'").ok());
  std::vector<uint8_t> back(size, 0);
  ASSERT_TRUE(GuardedCopy(back.data(), map, size, "region 'r'").ok());
  EXPECT_EQ(back, host);

  ASSERT_EQ(ftruncate(fd, 4096), 0);  // the client shrinks its object under the registration
  for (int round = 0; round < 3; ++round) {  // the guard re-arms after every fault
    const Status read = GuardedCopy(back.data(), map, size, "region 'r'");
    EXPECT_EQ(read.code(), absl::StatusCode::kInvalidArgument) << read;
    EXPECT_NE(read.message().find("region 'r'"), std::string::npos) << read;
    EXPECT_NE(read.message().find("truncated"), std::string::npos) << read;
    const Status write = GuardedCopy(map + 4096, host.data(), 16, "region 'r'");
    EXPECT_EQ(write.code(), absl::StatusCode::kInvalidArgument) << write;
    const auto word = GuardedLoad32(reinterpret_cast<const uint32_t*>(map + 2 * 4096), "the ring");
    EXPECT_EQ(word.status().code(), absl::StatusCode::kInvalidArgument) << word.status();
  }
  const auto first = GuardedLoad32(reinterpret_cast<const uint32_t*>(map), "the ring");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, 0x5a5a5a5au);
  // The first page is still backed.
  EXPECT_TRUE(GuardedCopy(back.data(), map, 4096, "region 'r'").ok());
  EXPECT_EQ(back[4095], 0x5a);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);  // grown back: zero-filled pages
  ASSERT_TRUE(GuardedCopy(back.data(), map, size, "region 'r'").ok());
  EXPECT_EQ(back[size - 1], 0);
  EXPECT_TRUE(GuardedCopy(back.data(), map, 0, "region 'r'").ok());
  close(fd);
  shm_unlink(key.c_str());
}

TEST(SigbusGuardDeathTest, UnguardedSigbusStillTerminates) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        ASSERT_TRUE(GuardedCopy(nullptr, nullptr, 0, "install").ok());  // handler installed
        const std::string key = "/kjit-sigbus-death-" + std::to_string(getpid());
        const int fd = shm_open(key.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
        if (fd < 0 || ftruncate(fd, 4096) != 0) return;
        auto* p = static_cast<volatile uint8_t*>(
            mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
        shm_unlink(key.c_str());
        p[4096] = 1;  // past the object's end, outside any guarded copy
      },
      "");
}

}  // namespace
}  // namespace kjit::ipc
