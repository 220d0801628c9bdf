// kjitd's process and network perimeter: signals other than the stop signals do not kill it, and a
// TCP port another daemon holds is refused rather than shared.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "inference/grpc_service.grpc.pb.h"
#include "tests/e2e/daemon_process.h"

namespace {

bool Live(const kjit::testing::DaemonProcess& d) {
  auto stub = inference::GRPCInferenceService::NewStub(d.Channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  inference::ServerLiveRequest req;
  inference::ServerLiveResponse resp;
  return stub->ServerLive(&ctx, req, &resp).ok() && resp.live();
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return -1;
  }
  close(fd);
  return ntohs(a.sin_port);
}

// SIGHUP, SIGUSR1 and SIGUSR2 used to kill kjitd at once (no log line, in-flight work lost, the
// socket left behind).
TEST(Perimeter, HupAndUserSignalsLeaveTheDaemonServing) {
  kjit::testing::DaemonProcess d;
  ASSERT_TRUE(d.ok()) << d.error();
  for (int sig : {SIGHUP, SIGUSR1, SIGUSR2, SIGHUP}) {
    ASSERT_EQ(kill(d.pid(), sig), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(kill(d.pid(), 0), 0) << "signal " << sig << " killed kjitd";
    EXPECT_TRUE(Live(d)) << "signal " << sig;
  }
  EXPECT_EQ(d.Stop(), 0);
}

// Two daemons on one TCP port used to share it silently (SO_REUSEPORT): the second must fail.
TEST(Perimeter, ATcpPortInUseIsRefused) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  const std::string listen = "127.0.0.1:" + std::to_string(port);
  kjit::testing::DaemonProcess first({"--listen", listen});
  ASSERT_TRUE(first.ok()) << first.error();
  kjit::testing::DaemonProcess second({"--listen", listen});
  EXPECT_FALSE(second.ok()) << "a second daemon started on " << listen;
  EXPECT_TRUE(Live(first));
}

}  // namespace
