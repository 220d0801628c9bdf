// libkjit_client's reading of CANCELLED: the library never cancels a call itself, so a CANCELLED
// answer is gRPC's for a call in flight while kjitd shut down, and the library reports the daemon
// unavailable (what a caller's fallback and retry look for). A stand-in server, gRPC's generic
// service on a Unix socket, answers every call CANCELLED; the client's first call (ServerLive, when
// it connects) gets that answer, so no mode can start and the reason says why.
#include <gtest/gtest.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "client/cpp/include/kjit_client.h"

namespace {

class CancellingServer {
 public:
  explicit CancellingServer(const std::string& socket) {
    grpc::ServerBuilder b;
    b.AddListeningPort("unix://" + socket, grpc::InsecureServerCredentials());
    b.RegisterAsyncGenericService(&generic_);
    cq_ = b.AddCompletionQueue();
    server_ = b.BuildAndStart();
    thread_ = std::thread([this] { Serve(); });
  }
  ~CancellingServer() {
    {
      // gRPC aborts on a RequestCall after Shutdown: none is issued once this holds the lock.
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      server_->Shutdown();
    }
    cq_->Shutdown();
    thread_.join();
  }

 private:
  // One call at a time: request it, answer CANCELLED at once, then the next, until shutdown.
  void Serve() {
    for (;;) {
      grpc::GenericServerContext ctx;
      grpc::GenericServerAsyncReaderWriter stream(&ctx);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
        generic_.RequestCall(&ctx, &stream, cq_.get(), cq_.get(), this);
      }
      void* tag = nullptr;
      bool ok = false;
      if (!cq_->Next(&tag, &ok) || !ok) return;  // not ok: the server is shutting down
      stream.Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the server is shutting down"), this);
      if (!cq_->Next(&tag, &ok)) return;
    }
  }
  grpc::AsyncGenericService generic_;
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  std::unique_ptr<grpc::Server> server_;
  std::thread thread_;
  std::mutex mu_;
  bool stopping_ = false;
};

TEST(ClientCancelled, ACancelledAnswerSaysKjitdStopped) {
  const std::string socket = "/tmp/kjit-cancelled-" + std::to_string(getpid()) + ".sock";
  CancellingServer server(socket);
  const std::string target = "unix://" + socket;
  kjit_client_options o{};
  o.struct_size = sizeof(o);
  o.target = target.c_str();
  o.modes = "remote";
  // The stand-in answers at once; a long deadline keeps a loaded machine (ctest -j, a concurrent
  // build) from turning the CANCELLED answer into a deadline run out, which reads differently.
  o.deadline_ms = 30000;
  o.client_name = "client_cancelled_test";
  kjit_client* c = nullptr;
  const int rc = kjit_client_create(&o, &c);
  const std::string error = kjit_last_error();
  EXPECT_EQ(rc, KJIT_FAILED_PRECONDITION) << error;  // no launch mode works
  EXPECT_NE(error.find("kjitd stopped while the call was in flight"), std::string::npos) << error;
  EXPECT_NE(error.find("retry once it is back"), std::string::npos) << error;
  if (c != nullptr) kjit_client_destroy(c);
  unlink(socket.c_str());
}

}  // namespace
