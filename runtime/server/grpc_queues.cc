#include "runtime/server/grpc_queues.h"

#include <algorithm>
#include <cstddef>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <type_traits>

#include "absl/strings/match.h"
#include "runtime/common/client_text.h"
#include "runtime/common/log.h"
#include "runtime/server/identity_slots.h"
#include "runtime/server/peer.h"

namespace kjit::server {
namespace {

// One call in flight on a queue; the queue's tag is the call. Proceed runs on the queue's thread.
class Call {
 public:
  virtual ~Call() = default;
  virtual void Proceed(bool ok) = 0;
};

// Calls answered on threads of their own (InferenceService::InferMayWait): counted, so that the
// queues are shut down only once each has posted its answer (posting to a shut-down queue aborts).
class OffloadedCalls {
 public:
  // At most kMax at once, and of them ipc::IdentityShare for one identity (PeerIdentity); past
  // either, the queue's thread refuses the call (InferenceService::MarkQueueThread).
  static constexpr int kMax = 64;
  bool TryAcquire(const std::string& identity) {
    std::lock_guard<std::mutex> lock(mu_);
    return slots_.TryTake(identity) == IdentitySlots::Taken::kYes;
  }
  void Release(const std::string& identity) {
    std::lock_guard<std::mutex> lock(mu_);
    slots_.Give(identity);
    if (slots_.total() == 0) cv_.notify_all();
  }
  void WaitForNone() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return slots_.total() == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  IdentitySlots slots_{kMax};
};
OffloadedCalls& Offloaded() {
  static OffloadedCalls* const calls = new OffloadedCalls;
  return *calls;
}

// A unary call of one method: posted (waiting for a request), then answered, then deleted. A new
// call of the same method is posted as soon as this one has its request, so the method always has
// one waiting. kPost is the service's generated RequestX, kHandle its handler; kMayWait (or null)
// tells a request whose handler may wait long, which is then handled and answered on a thread of
// its own so that the queue's thread keeps serving (a synchronous launch's kjit_wait_event may
// take up to --launch-timeout-ms).
template <typename Request, typename Response, auto kPost, auto kHandle, auto kMayWait = nullptr>
class UnaryCall final : public Call {
 public:
  UnaryCall(InferenceService* service, grpc::ServerCompletionQueue* cq)
      : service_(service), cq_(cq), responder_(&ctx_) {
    (service_->*kPost)(&ctx_, &request_, &responder_, cq_, cq_, this);
  }

  void Proceed(bool ok) override {
    if (answered_ || !ok) {  // answered, or the server is shutting down and never sent a request
      delete this;
      return;
    }
    new UnaryCall(service_, cq_);
    answered_ = true;  // before the answer: its completion comes back here and deletes the call
    // The token first, once: a request without it is answered at once, not parsed (nor offloaded).
    const grpc::Status token = Guarded([this] { return service_->CheckToken(ctx_); });
    if constexpr (!std::is_same_v<decltype(kMayWait), std::nullptr_t>) {
      // Out of memory or threads, the call is answered here as any other (Guarded turns the
      // exceptions into statuses).
      bool may_wait = false;
      try {
        may_wait = token.ok() && (service_->*kMayWait)(request_);
      } catch (const std::exception&) {
      }
      std::string identity;
      if (may_wait) {
        try {
          identity = PeerIdentity(ctx_);
        } catch (const std::exception&) {
          may_wait = false;  // answered here: refused before any wait
        }
      }
      if (may_wait && Offloaded().TryAcquire(identity)) {
        try {
          std::thread([this, identity] {
            const grpc::Status status = Handle();
            responder_.Finish(response_, status, this);  // the last use of the call on this thread
            Offloaded().Release(identity);
          }).detach();
          return;
        } catch (const std::exception&) {
          Offloaded().Release(identity);
        }
      }
    }
    const grpc::Status status = token.ok() ? Handle() : token;  // what every synchronous handler checks first too
    responder_.Finish(response_, status, this);
  }

 private:
  grpc::Status Handle() { return Guarded([this] { return (service_->*kHandle)(ctx_, request_, &response_); }); }

  // f's status. An exception must not leave this thread (it would end the process): out of memory
  // is the client's RESOURCE_EXHAUSTED, anything else INTERNAL, and the daemon keeps serving.
  template <typename F>
  grpc::Status Guarded(F f) {
    try {
      return f();
    } catch (const std::bad_alloc&) {
      response_ = Response();
      LogRateLimited(LogLevel::kWarn, "out-of-memory", "a request failed: kjitd is out of memory");
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          "kjitd is out of memory (or address space) for this request; retry later or send less");
    } catch (const std::exception& e) {
      response_ = Response();
      LogRateLimited(LogLevel::kError, "exception", absl::StrCat("a request failed: ", e.what()));
      return grpc::Status(grpc::StatusCode::INTERNAL, "kjitd failed on this request; see its log");
    }
  }

  InferenceService* service_;
  grpc::ServerCompletionQueue* cq_;
  grpc::ServerContext ctx_;
  Request request_;
  Response response_;
  grpc::ServerAsyncResponseWriter<Response> responder_;
  bool answered_ = false;
};

// A call of a method no service has: answered UNIMPLEMENTED at once, then deleted; a new one is
// posted as soon as this one has its call.
class UnknownMethodCall final : public Call {
 public:
  UnknownMethodCall(grpc::AsyncGenericService* service, grpc::ServerCompletionQueue* cq)
      : service_(service), cq_(cq), stream_(&ctx_) {
    service_->RequestCall(&ctx_, &stream_, cq_, cq_, this);
  }

  void Proceed(bool ok) override {
    if (answered_ || !ok) {
      delete this;
      return;
    }
    new UnknownMethodCall(service_, cq_);
    answered_ = true;
    // Reflection's names reach here only where it is not served (flags.h: ReflectionServed).
    const bool reflection = absl::StartsWith(ctx_.method(), "/grpc.reflection.");
    stream_.Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                reflection ? "kjitd serves gRPC server reflection only where its own user alone can "
                                             "call (see kjitd --help), or with --reflection on"
                                           : "kjitd has no method " + ClientText(ctx_.method())),
                   this);
  }

 private:
  grpc::AsyncGenericService* service_;
  grpc::ServerCompletionQueue* cq_;
  grpc::GenericServerContext ctx_;
  grpc::GenericServerAsyncReaderWriter stream_;
  bool answered_ = false;
};

using LiveCall =
    UnaryCall<grpc::ByteBuffer, grpc::ByteBuffer, &InferenceService::RequestServerLive, &InferenceService::Live>;
using InferCall = UnaryCall<grpc::ByteBuffer, grpc::ByteBuffer, &InferenceService::RequestModelInfer,
                            &InferenceService::InferBytes, &InferenceService::InferMayWait>;

// Calls of each method posted per queue: a burst of clients finds one waiting without a re-post.
constexpr int kPostedPerMethod = 2;

}  // namespace

CompletionQueueThreads::CompletionQueueThreads(InferenceService* service, grpc::ServerBuilder* builder, int threads) : service_(service) {
  builder->RegisterAsyncGenericService(&unknown_methods_);
  for (int i = 0; i < std::max(1, threads); ++i) queues_.push_back(builder->AddCompletionQueue());
}

CompletionQueueThreads::~CompletionQueueThreads() { Shutdown(); }

void CompletionQueueThreads::Start() {
  if (started_) return;
  started_ = true;
  for (auto& q : queues_) {
    grpc::ServerCompletionQueue* cq = q.get();
    for (int i = 0; i < kPostedPerMethod; ++i) {
      new LiveCall(service_, cq);
      new InferCall(service_, cq);
    }
    new UnknownMethodCall(&unknown_methods_, cq);
    threads_.emplace_back([cq] {
      InferenceService::MarkQueueThread();
      void* tag = nullptr;
      bool ok = false;
      while (cq->Next(&tag, &ok)) static_cast<Call*>(tag)->Proceed(ok);
    });
  }
}

void CompletionQueueThreads::Shutdown() {
  if (stopped_) return;
  stopped_ = true;
  Offloaded().WaitForNone();  // each answers within --launch-timeout-ms
  for (auto& q : queues_) q->Shutdown();  // the threads drain what is left, then Next returns false
  for (auto& t : threads_) t.join();
  if (!started_) {  // never started: drain here
    for (auto& q : queues_) {
      void* tag = nullptr;
      bool ok = false;
      while (q->Next(&tag, &ok)) {
      }
    }
  }
}

}  // namespace kjit::server
