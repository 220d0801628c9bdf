// ServerLive and ModelInfer through gRPC's asynchronous API: each of `threads` threads owns a
// completion queue, takes a call from it, handles it and answers it itself. Once a server has an
// asynchronous queue, gRPC leaves the socket's polling to those threads, so the hot calls cost no
// thread hand-off (measured on a 2-core box, empty round trip p50: 48 -> 36 us with the health
// service of health_service.h). Every other method stays synchronous.
//
// Nothing slow may run on these threads: a synchronous ModelInfer holds one for its launch and
// stream sync (tens of us), an asynchronous one for its enqueue. A synchronous ModelInfer with a
// kjit_wait_event, which may wait up to --launch-timeout-ms for the event, is answered on a thread
// of its own (at most 64 at once, 48 for one user; Shutdown waits for them); past that, or for a
// request past 1 MiB, it is refused (RESOURCE_EXHAUSTED) instead of waiting on the queue's thread,
// where it held up every client's calls. Calls are not routed by GPU; one
// thread per GPU lets two GPUs' launches run at the same time.
//
// These threads also answer the method names no service has (UNIMPLEMENTED, at once), through the
// generic service gRPC requires of a server whose services took methods out (bounded_methods.h). A
// queue of its own would need threads of its own, and gRPC lets every queue's threads poll the
// sockets: measured on a 2-core box with a Python client, such threads (or a callback generic
// service) took an empty ServerLive round trip from about 112 to about 145 us.
#pragma once

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <thread>
#include <vector>

#include "runtime/server/inference_service.h"

namespace kjit::server {

class CompletionQueueThreads {
 public:
  // Adds the queues and the generic service to `builder`: before BuildAndStart.
  CompletionQueueThreads(InferenceService* service, grpc::ServerBuilder* builder, int threads);
  ~CompletionQueueThreads();
  CompletionQueueThreads(const CompletionQueueThreads&) = delete;
  CompletionQueueThreads& operator=(const CompletionQueueThreads&) = delete;

  // After BuildAndStart: posts the first requests and starts the threads.
  void Start();
  // After the server's Shutdown (which completes or cancels the calls in flight): drains the queues
  // and joins the threads. Idempotent.
  void Shutdown();

 private:
  InferenceService* service_;
  grpc::AsyncGenericService unknown_methods_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> threads_;
  bool started_ = false, stopped_ = false;
};

}  // namespace kjit::server
