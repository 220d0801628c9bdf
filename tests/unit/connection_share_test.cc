// ConnectionShare: one Unix user's share of kjitd's socket connections, counted by descriptor and
// socket inode, with connections that gRPC closed (or whose descriptor now names another object)
// found on the next check.
#include "runtime/server/connection_share.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <utility>

namespace kjit::server {
namespace {

using Clock = ConnectionShare::Clock;

// Descriptors the fake kernel has open: fd -> inode.
struct FakeFds {
  std::map<int, ino_t> open;
  ConnectionShare::Alive alive() {
    return [this](int fd, ino_t ino) {
      const auto it = open.find(fd);
      return it != open.end() && it->second == ino;
    };
  }
};

TEST(ConnectionShare, OneUserHoldsAtMostItsShareAndOthersStillConnect) {
  FakeFds fds;
  ConnectionShare share(3, fds.alive());
  const Clock::time_point t0 = Clock::now();
  for (int fd = 10; fd < 13; ++fd) {
    fds.open[fd] = 100 + fd;
    EXPECT_TRUE(share.Admit(fd, 1000, 100 + fd, t0));
  }
  fds.open[13] = 113;
  EXPECT_FALSE(share.Admit(13, 1000, 113, t0));  // the caller closes it
  fds.open.erase(13);
  EXPECT_EQ(share.CountOf(1000), 3);
  fds.open[13] = 213;
  EXPECT_TRUE(share.Admit(13, 2000, 213, t0));  // another user
  EXPECT_EQ(share.CountOf(2000), 1);
}

TEST(ConnectionShare, ConnectionsClosedElsewhereMakeRoomAtTheNextCheck) {
  FakeFds fds;
  ConnectionShare share(2, fds.alive());
  Clock::time_point t = Clock::now();
  fds.open = {{10, 110}, {11, 111}};
  ASSERT_TRUE(share.Admit(10, 1000, 110, t));
  ASSERT_TRUE(share.Admit(11, 1000, 111, t));
  fds.open[12] = 112;
  EXPECT_FALSE(share.Admit(12, 1000, 112, t));  // checked: both still open
  // gRPC closes fd 10; a cache file takes the number (another inode): that connection has ended.
  fds.open[10] = 999;
  t += ConnectionShare::kRecheck / 2;
  EXPECT_FALSE(share.Admit(12, 1000, 112, t));  // within kRecheck of the last check: not checked again
  t += ConnectionShare::kRecheck;
  EXPECT_TRUE(share.Admit(12, 1000, 112, t));
  EXPECT_EQ(share.CountOf(1000), 2);
}

TEST(ConnectionShare, AReusedDescriptorNumberEndsWhatWasCountedUnderIt) {
  FakeFds fds;
  ConnectionShare share(1, fds.alive());
  const Clock::time_point t = Clock::now();
  fds.open[10] = 110;
  ASSERT_TRUE(share.Admit(10, 1000, 110, t));
  // accept returned 10 again, so user 1000's connection on it was closed; now it is user 2000's.
  fds.open[10] = 210;
  EXPECT_TRUE(share.Admit(10, 2000, 210, t));
  EXPECT_EQ(share.CountOf(1000), 0);
  EXPECT_EQ(share.CountOf(2000), 1);
  fds.open[11] = 111;
  EXPECT_TRUE(share.Admit(11, 1000, 111, t));
  share.Forget(11);  // closed by the listener itself
  EXPECT_EQ(share.CountOf(1000), 0);
  share.Forget(42);  // never counted: nothing happens
  EXPECT_EQ(share.CountOf(2000), 1);
}

TEST(ConnectionShare, TheKernelsViewOfASocket) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  struct stat st {};
  ASSERT_EQ(fstat(sv[0], &st), 0);
  EXPECT_TRUE(ConnectionShare::SocketIsOpen(sv[0], st.st_ino));
  EXPECT_FALSE(ConnectionShare::SocketIsOpen(sv[1], st.st_ino));  // the other end: another inode
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  close(sv[0]);
  EXPECT_FALSE(ConnectionShare::SocketIsOpen(sv[0], st.st_ino));  // closed (or reused by the pipe)
  close(sv[1]);
  close(pipefd[0]);
  close(pipefd[1]);
  EXPECT_FALSE(ConnectionShare::SocketIsOpen(-1, 0));
}

TEST(ConnectionShare, ACapBelowOneIsOne) {
  FakeFds fds;
  ConnectionShare share(0, fds.alive());
  EXPECT_EQ(share.cap(), 1);
}

}  // namespace
}  // namespace kjit::server
