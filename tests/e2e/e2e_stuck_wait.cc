// e2e_ipc_client --mode stuck: a kjit_wait_event that does not complete costs a bounded time, and
// only where the GPU must wait for it. Run against a kjitd started with --launch-timeout-ms
// kStuckTimeoutMs (tests/gpu/e2e_stuck.sh). The client's stream is held on a host flag (StreamHold)
// with the "-ready" event recorded behind it, so "-ready" stays pending until the hold is released:
//   1. a synchronous launch waiting on "-ready": DEADLINE_EXCEEDED after the timeout, and nothing
//      else delayed: a launch sent over gRPC while it waits answers at once, and so does the next
//      synchronous launch without a wait event, correctly;
//   2. an asynchronous launch waiting on "-ready" is queued (its reply comes at once); the next
//      synchronous launch cannot start behind it: DEADLINE_EXCEEDED after the timeout, naming the
//      event; launches after it, synchronous or not, are refused at once (UNAVAILABLE);
//      DaemonStatus shows the GPU blocked meanwhile;
//   3. once the hold is released the asynchronous launch runs (its o equals an in-process launch)
//      and the GPU takes launches again (a synchronous launch answers correctly; not blocked).
#include "tests/e2e/e2e_stuck_wait.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "tests/e2e/stream_hold.h"

namespace kjit::e2e {
namespace {

constexpr size_t kInBytes = 64u << 20, kOutBytes = 16u << 20;
// The hold outlasts every step that needs "-ready" pending (two timeouts and some refusals).
constexpr std::chrono::milliseconds kHoldLimit(30000);

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Status RunStuck(Client* x) {
  KJIT_RETURN_IF_ERROR(OpenSession(x, "e2e_ipc_client stuck"));
  KJIT_ASSIGN_OR_RETURN(Arenas a, MakeArenas(x, kInBytes, kOutBytes));
  KJIT_ASSIGN_OR_RETURN(ReadyDone events, MakeReadyDone(x));
  const driver::Event &ready = events.ready, &done = events.done;
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  const reference::MlaCase c = reference::MakeCase(Cases()[0]);
  KJIT_ASSIGN_OR_RETURN(CaseLayout l, UploadCase(c, a.in.get(), a.out.get()));
  const CUstream cs = x->stream->get();
  const double timeout_s = kStuckTimeoutMs / 1000.0;

  auto request = [&](const char* id, bool wait, bool signal) {
    inference::ModelInferRequest req = InferRequest("mla_verify", c, l, x->prefix + "-in", x->prefix + "-out", x->device, false);
    req.set_id(id);
    auto& params = *req.mutable_parameters();
    if (wait) params["kjit_wait_event"].set_string_param(x->prefix + "-ready");
    if (signal) {
      params["kjit_signal_event"].set_string_param(x->prefix + "-done");
      params["kjit_max_draft"].set_int64_param(l.problem.max_draft);
      params["kjit_max_prefix"].set_int64_param(l.problem.max_prefix);
    }
    return req;
  };
  struct Answer {
    grpc::Status status;
    double seconds;
  };
  auto call = [&](const inference::ModelInferRequest& req) {
    inference::ModelInferResponse resp;
    const auto t0 = std::chrono::steady_clock::now();
    const grpc::Status s = Call(x, req, &resp);
    return Answer{s, Seconds(t0)};
  };
  // `a` ran into the timeout: DEADLINE_EXCEEDED naming the pending event, once the timeout had passed.
  auto check_timed_out = [&](const Answer& a, const std::string& what) -> Status {
    KJIT_E2E_CHECK(a.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
                       absl::StrContains(a.status.error_message(), x->prefix + "-ready"),
                   absl::StrCat(what, ": code ", static_cast<int>(a.status.error_code()), " '",
                                a.status.error_message(), "'"));
    KJIT_E2E_CHECK(a.seconds >= 0.9 * timeout_s && a.seconds < timeout_s + 5,
                   absl::StrCat(what, ": answered after ", a.seconds, " s"));
    return absl::OkStatus();
  };
  // While the client's stream is held nothing may synchronize with it (an in-process launch
  // synchronizes the context): o is poisoned and read on a non-blocking stream of its own, and
  // compared with the in-process launch once the hold is released.
  KJIT_ASSIGN_OR_RETURN(driver::Stream side, driver::Stream::Create(CU_STREAM_NON_BLOCKING));
  auto read_o = [&](std::vector<uint16_t>* o) -> Status {
    o->assign(l.o_bytes / 2, 0);
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemcpyDtoHAsync(o->data(), a.out->base() + l.o_offset, l.o_bytes,
                                                              side.get()), "read o"));
    return side.Synchronize();
  };
  auto poison_o = [&]() -> Status {
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemsetD8Async(a.out->base() + l.o_offset, 0xFF, l.o_bytes, side.get()),
                                       "poison o"));
    return side.Synchronize();
  };
  std::vector<uint16_t> o_free, o_async, o_again;

  // DaemonStatus's word on this GPU: refusing launches until its stream drains?
  auto gpu_blocked = [&]() -> StatusOr<bool> {
    grpc::ClientContext ctx;
    kjit::v1::DaemonStatusRequest req;
    kjit::v1::DaemonStatusResponse resp;
    const grpc::Status s = x->kernels->DaemonStatus(&ctx, req, &resp);
    if (!s.ok()) return absl::InternalError("DaemonStatus: " + s.error_message());
    for (const auto& g : resp.gpus()) {
      if (g.ordinal() == x->device) return g.blocked();
    }
    return absl::InternalError(absl::StrCat("DaemonStatus lists no GPU ", x->device));
  };

  KJIT_ASSIGN_OR_RETURN(std::unique_ptr<StreamHold> hold, StreamHold::Start(cs, kHoldLimit));
  KJIT_RETURN_IF_ERROR(ready.Record(cs));
  auto pending = [&] { return api->cuEventQuery(ready.get()) == CUDA_ERROR_NOT_READY; };

  // 1. A synchronous launch on an event that does not complete fails alone, and holds nothing that
  // another call needs while it waits: a launch sent meanwhile over gRPC answers at once.
  Answer sync_wait{}, meanwhile{};
  {
    std::thread waiter([&] { sync_wait = call(request("sync-wait", true, false)); });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    meanwhile = call(request("sync-meanwhile", false, false));
    waiter.join();
  }
  KJIT_E2E_CHECK(meanwhile.status.ok() && meanwhile.seconds < 0.5 * timeout_s,
                 absl::StrCat("a launch sent while a synchronous call waited for its event: '",
                              meanwhile.status.error_message(), "' after ", meanwhile.seconds, " s"));
  KJIT_RETURN_IF_ERROR(check_timed_out(sync_wait, "sync launch on a pending wait event"));
  KJIT_RETURN_IF_ERROR(poison_o());
  const Answer free_call = call(request("sync-free", false, false));
  KJIT_E2E_CHECK(free_call.status.ok() && free_call.seconds < 0.5 * timeout_s,
                 absl::StrCat("a launch after the failed wait: '", free_call.status.error_message(), "' after ",
                              free_call.seconds, " s"));
  KJIT_RETURN_IF_ERROR(read_o(&o_free));
  std::printf("PASS stuck: a sync launch on a pending wait event: DEADLINE_EXCEEDED in %.2f s (%s); a launch sent "
              "while it waited answered in %.3f s, the next one in %.3f s\n", sync_wait.seconds,
              sync_wait.status.error_message().c_str(), meanwhile.seconds, free_call.seconds);

  // 2. An asynchronous launch queued behind the pending event: later launches get bounded answers.
  KJIT_RETURN_IF_ERROR(poison_o());
  const Answer async_wait = call(request("async-wait", true, true));
  KJIT_E2E_CHECK(async_wait.status.ok() && async_wait.seconds < 0.5 * timeout_s,
                 absl::StrCat("async launch on a pending wait event: '", async_wait.status.error_message(), "'"));
  const Answer behind = call(request("sync-behind", false, false));
  KJIT_RETURN_IF_ERROR(check_timed_out(behind, "sync launch behind a pending async launch"));
  for (const bool async : {false, true}) {
    const Answer refused = call(request(async ? "async-refused" : "sync-refused", false, async));
    KJIT_E2E_CHECK(refused.status.error_code() == grpc::StatusCode::UNAVAILABLE && refused.seconds < 0.5 * timeout_s &&
                       absl::StrContains(refused.status.error_message(), "takes no launches"),
                   absl::StrCat(async ? "async" : "sync", " launch on the blocked GPU: code ",
                                static_cast<int>(refused.status.error_code()), " '", refused.status.error_message(),
                                "' after ", refused.seconds, " s"));
  }
  KJIT_ASSIGN_OR_RETURN(const bool blocked, gpu_blocked());
  KJIT_E2E_CHECK(blocked, "DaemonStatus does not show the GPU blocked while it refuses launches");
  KJIT_E2E_CHECK(pending(), "'-ready' completed while the client's stream was held");
  std::printf("PASS stuck: behind a pending async launch, a sync launch: DEADLINE_EXCEEDED in %.2f s (%s); then "
              "UNAVAILABLE at once\n", behind.seconds, behind.status.error_message().c_str());

  // 3. Released: the queued launch runs, and the GPU takes launches again.
  hold->Release();
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamWaitEvent(cs, done.get(), 0), "wait for the daemon"));
  KJIT_RETURN_IF_ERROR(x->stream->Synchronize());
  KJIT_RETURN_IF_ERROR(read_o(&o_async));
  KJIT_RETURN_IF_ERROR(poison_o());
  Answer again{};
  for (int i = 0; i < 50; ++i) {  // the stream drains once the daemon's copy after "-done" has run
    again = call(request("sync-again", false, false));
    if (again.status.error_code() != grpc::StatusCode::UNAVAILABLE) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  KJIT_E2E_CHECK(again.status.ok(), "a launch after the release: " + again.status.error_message());
  KJIT_ASSIGN_OR_RETURN(const bool still_blocked, gpu_blocked());
  KJIT_E2E_CHECK(!still_blocked, "DaemonStatus still shows the GPU blocked after it took a launch again");
  KJIT_RETURN_IF_ERROR(read_o(&o_again));
  KJIT_ASSIGN_OR_RETURN(InProcessResult mine, RunInProcess("mla_verify", *x->loaded, x->info, l, a.in->base(), cs));
  for (const auto& [o, what] : {std::pair{&o_free, "the launch after the failed wait"},
                                std::pair{&o_async, "the asynchronous launch, released"},
                                std::pair{&o_again, "the launch after the release"}}) {
    KJIT_E2E_CHECK(std::memcmp(o->data(), mine.o.data(), l.o_bytes) == 0,
                   absl::StrCat(what, ": o differs from the in-process launch"));
  }
  std::printf("PASS stuck: released, the queued launch ran correctly and the GPU takes launches again\n");
  return absl::OkStatus();
}

}  // namespace kjit::e2e
