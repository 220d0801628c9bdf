// Test helper: a real kjitd on a temporary Unix socket with a temporary cache directory, started
// as a child process and stopped with SIGTERM.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

namespace kjit::testing {

class DaemonProcess {
 public:
  // Starts kjitd (kjitd_path, or the build's kjitd when empty) with extra flags (a repeated flag's
  // last value wins); waits until health says SERVING. On failure, ok() is false and error() says
  // why.
  explicit DaemonProcess(std::vector<std::string> extra_flags = {}, std::string kjitd_path = {});
  ~DaemonProcess();

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& socket() const { return socket_; }
  const std::string& dir() const { return dir_; }
  std::string target() const { return "unix://" + socket_; }
  std::shared_ptr<grpc::Channel> Channel() const;
  // Sends SIGTERM and waits; returns the exit status (-1 when it did not exit in time).
  int Stop();
  pid_t pid() const { return pid_; }  // for tests that stop or kill the daemon themselves
  // SIGKILL (when it runs), then a new kjitd with the same flags on the same socket and cache,
  // waited for as at construction: ok() says whether it came up.
  bool KillAndRestart();

 private:
  void Start();
  bool SocketAnswers() const;
  std::vector<std::string> args_;
  std::string dir_, socket_, error_;
  pid_t pid_ = -1;
};

}  // namespace kjit::testing
