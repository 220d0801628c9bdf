#include "tests/e2e/daemon_process.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "health/v1/health.grpc.pb.h"
#include "tests/e2e/channel.h"

namespace kjit::testing {

DaemonProcess::DaemonProcess(std::vector<std::string> extra_flags, std::string kjitd_path) {
  char tmpl[] = "/tmp/kjitd-test-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    error_ = "mkdtemp failed";
    return;
  }
  dir_ = tmpl;
  socket_ = dir_ + "/run/kjitd.sock";  // run/ does not exist: the daemon creates it (0700)
  if (kjitd_path.empty()) kjitd_path = KJITD_PATH;
  args_ = {kjitd_path, "--socket", socket_, "--cache-dir", dir_ + "/cache", "--log-level", "warn"};
  args_.insert(args_.end(), extra_flags.begin(), extra_flags.end());
  Start();
}

bool DaemonProcess::KillAndRestart() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  error_.clear();
  Start();
  return ok();
}

void DaemonProcess::Start() {
  pid_ = fork();
  if (pid_ == 0) {
    std::vector<char*> argv;
    for (auto& a : args_) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (pid_ < 0) {
    error_ = "fork failed";
    return;
  }
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  auto exited = [this] {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
    pid_ = -1;
    error_ = "kjitd exited during startup with status " + std::to_string(status);
    return true;
  };
  // Connect only once the socket is served: a failed connect puts the channel into reconnect
  // backoff (a killed daemon's socket file stays until the next one replaces it).
  while (!SocketAnswers() && std::chrono::steady_clock::now() < give_up) {
    if (exited()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto stub = grpc::health::v1::Health::NewStub(Channel());
  while (std::chrono::steady_clock::now() < give_up) {
    if (exited()) return;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    if (stub->Check(&ctx, req, &resp).ok() &&
        resp.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  error_ = "kjitd did not become SERVING within 120 s";
}

bool DaemonProcess::SocketAnswers() const {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", socket_.c_str());
  const bool up = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return up;
}

std::shared_ptr<grpc::Channel> DaemonProcess::Channel() const { return DaemonChannel(target()); }

int DaemonProcess::Stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < give_up) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  return -1;
}

DaemonProcess::~DaemonProcess() {
  Stop();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

}  // namespace kjit::testing
