#include "runtime/server/grpc_queues.h"

#include <algorithm>
#include <exception>
#include <new>

#include "runtime/common/log.h"

namespace kjit::server {
namespace {

// One call in flight on a queue; the queue's tag is the call. Proceed runs on the queue's thread.
class Call {
 public:
  virtual ~Call() = default;
  virtual void Proceed(bool ok) = 0;
};

// A unary call of one method: posted (waiting for a request), then answered, then deleted. A new
// call of the same method is posted as soon as this one has its request, so the method always has
// one waiting. kPost is the service's generated RequestX, kHandle its handler.
template <typename Request, typename Response, auto kPost, auto kHandle>
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
    grpc::Status status;
    // An exception must not leave this thread (it would end the process): out of memory is the
    // client's RESOURCE_EXHAUSTED, anything else INTERNAL, and the daemon keeps serving.
    try {
      status = service_->CheckToken(ctx_);  // what every synchronous handler checks first too
      if (status.ok()) status = (service_->*kHandle)(ctx_, request_, &response_);
    } catch (const std::bad_alloc&) {
      response_ = Response();
      status = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            "kjitd is out of memory (or address space) for this request; retry later or send less");
      LogRateLimited(LogLevel::kWarn, "out-of-memory", "a request failed: kjitd is out of memory");
    } catch (const std::exception& e) {
      response_ = Response();
      status = grpc::Status(grpc::StatusCode::INTERNAL, "kjitd failed on this request; see its log");
      LogRateLimited(LogLevel::kError, "exception", absl::StrCat("a request failed: ", e.what()));
    }
    answered_ = true;
    responder_.Finish(response_, status, this);
  }

 private:
  InferenceService* service_;
  grpc::ServerCompletionQueue* cq_;
  grpc::ServerContext ctx_;
  Request request_;
  Response response_;
  grpc::ServerAsyncResponseWriter<Response> responder_;
  bool answered_ = false;
};

using LiveCall = UnaryCall<inference::ServerLiveRequest, inference::ServerLiveResponse,
                           &InferenceService::RequestServerLive, &InferenceService::Live>;
using InferCall = UnaryCall<grpc::ByteBuffer, grpc::ByteBuffer, &InferenceService::RequestModelInfer,
                            &InferenceService::InferBytes>;

// Calls of each method posted per queue: a burst of clients finds one waiting without a re-post.
constexpr int kPostedPerMethod = 2;

}  // namespace

CompletionQueueThreads::CompletionQueueThreads(InferenceService* service, grpc::ServerBuilder* builder, int threads) : service_(service) {
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
    threads_.emplace_back([cq] {
      void* tag = nullptr;
      bool ok = false;
      while (cq->Next(&tag, &ok)) static_cast<Call*>(tag)->Proceed(ok);
    });
  }
}

void CompletionQueueThreads::Shutdown() {
  if (stopped_) return;
  stopped_ = true;
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
