// e2e_ipc_client: a second process using kjitd the way an inference worker does (CUDA buffers
// shared by IPC handle, launches through ModelInfer), checked bit for bit against in-process
// launches of the same cubins and against the float64 reference.
//   e2e_ipc_client --target unix:///path [--mode sync|async|ring|victim|after-kill|demo|cross|wrong-device|stuck]
//                  [--device N] [--other-device M] [--prefix NAME]
// sync:       every case, both models, region and inline variants; kv_indices >= S is reported.
// async:      kjit_wait_event / kjit_signal_event with IPC events; no host synchronization between
//             producing q, the daemon's launch and consuming o.
// ring:       every case and model as sync, through a shared-memory launch ring (OpenRing).
// victim:     registers regions and an event under a session, prints "ready", launches until killed.
// after-kill: the victim's regions and event are gone and the daemon still serves correct launches.
// demo:       one launch, one line.
// cross:      regions on --device, a launch asking for --other-device: INVALID_ARGUMENT (two GPUs).
// wrong-device: run with CUDA_VISIBLE_DEVICES naming another GPU than the daemon's --device N: the
//             registration claims device_id N for memory on another GPU, whose UUID it sends
//             (kjit-device-uuid): INVALID_ARGUMENT.
// stuck:      a kjit_wait_event that does not complete (e2e_stuck_wait.cc; kjitd with
//             --launch-timeout-ms kStuckTimeoutMs): bounded answers, the GPU blocked only behind it.
// --prefix names this client's regions and events (default "e2e"), so clients can run at once.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/kernels/mla_verify/plan.h"
#include "tests/e2e/e2e_client.h"
#include "tests/e2e/e2e_stuck_wait.h"
#include "tests/e2e/stream_hold.h"

namespace kjit::e2e {
namespace {

constexpr size_t kInBytes = 256u << 20, kOutBytes = 64u << 20;

constexpr std::chrono::milliseconds kHoldLimit(3000);

Status RunSync(Client* x) {
  KJIT_RETURN_IF_ERROR(OpenSession(x, "e2e_ipc_client sync"));
  KJIT_ASSIGN_OR_RETURN(Arenas a, MakeArenas(x, kInBytes, kOutBytes));
  for (const auto& spec : Cases()) {
    const reference::MlaCase c = reference::MakeCase(spec);
    KJIT_ASSIGN_OR_RETURN(CaseLayout l, UploadCase(c, a.in.get(), a.out.get()));
    for (const char* model : {"mla_verify", "mla_verify_naive"}) {
      for (bool inline_small : {false, true}) KJIT_RETURN_IF_ERROR(CheckCase(x, a, c, l, model, inline_small));
    }
  }
  // A slot index >= S: the kernel never reads it and the daemon reports the error word.
  reference::MlaCase c = reference::MakeCase(Cases()[0]);
  c.kv_indices[3] = static_cast<int64_t>(c.kv_cache.size() / kernels::kMlaKDim);
  KJIT_ASSIGN_OR_RETURN(CaseLayout l, UploadCase(c, a.in.get(), a.out.get()));
  inference::ModelInferResponse resp;
  const grpc::Status s =
      Call(x, InferRequest("mla_verify", c, l, x->prefix + "-in", x->prefix + "-out", x->device, false), &resp);
  KJIT_E2E_CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
                     s.error_message().find("kv_indices") != std::string::npos,
                 absl::StrCat("kv_indices >= S gave code ", s.error_code(), ": ", s.error_message()));
  std::printf("PASS kv_indices >= S -> INVALID_ARGUMENT\n");
  // kjit_max_draft: index pointers in the region are checked by the kernels instead of read back; o
  // is bitwise the in-process launch's, and a qo_indptr past N comes back as INVALID_ARGUMENT.
  {
    const reference::MlaCase g = reference::MakeCase(Cases()[0]);
    KJIT_ASSIGN_OR_RETURN(CaseLayout gl, UploadCase(g, a.in.get(), a.out.get()));
    KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
    inference::ModelInferRequest req = InferRequest("mla_verify", g, gl, x->prefix + "-in", x->prefix + "-out", x->device, false);
    (*req.mutable_parameters())["kjit_max_draft"].set_int64_param(gl.problem.max_draft);
    (*req.mutable_parameters())["kjit_max_prefix"].set_int64_param(gl.problem.max_prefix);
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemsetD8(a.out->base() + gl.o_offset, 0xFF, gl.o_bytes), "poison o"));
    const grpc::Status ok = Call(x, req, &resp);
    KJIT_E2E_CHECK(ok.ok(), "ModelInfer with kjit_max_draft: " + ok.error_message());
    std::vector<uint16_t> o(gl.o_bytes / 2);
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemcpyDtoH(o.data(), a.out->base() + gl.o_offset, gl.o_bytes), "read o"));
    KJIT_ASSIGN_OR_RETURN(InProcessResult mine,
                          RunInProcess("mla_verify", *x->loaded, x->info, gl, a.in->base(), x->stream->get()));
    KJIT_E2E_CHECK(std::memcmp(o.data(), mine.o.data(), gl.o_bytes) == 0, "kjit_max_draft: o differs from in-process");
    size_t k = 0;
    while (k < gl.inputs.size() && gl.inputs[k].name != "qo_indptr") ++k;
    KJIT_E2E_CHECK(k < gl.inputs.size(), "the case has qo_indptr");
    const int32_t past_n = static_cast<int32_t>(g.qo_indptr.back()) + 5;
    KJIT_RETURN_IF_ERROR(driver::Check(
        api->cuMemcpyHtoD(a.in->base() + gl.input_offsets[k] + sizeof(int32_t), &past_n, sizeof(past_n)), "poke"));
    const grpc::Status bad = Call(x, req, &resp);
    KJIT_E2E_CHECK(bad.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
                       bad.error_message().find("qo_indptr") != std::string::npos,
                   absl::StrCat("kjit_max_draft with a qo_indptr past N gave code ", bad.error_code(), ": ",
                                bad.error_message()));
    std::printf("PASS kjit_max_draft: checked on the GPU, bitwise equal; a bad qo_indptr -> INVALID_ARGUMENT\n");
  }
  return absl::OkStatus();
}

Status RunRing(Client* x) {
  KJIT_RETURN_IF_ERROR(OpenSession(x, "e2e_ipc_client ring"));
  KJIT_ASSIGN_OR_RETURN(Arenas a, MakeArenas(x, kInBytes, kOutBytes));
  // 16 MiB: 8 MiB for a response, which carries o inline in the inline variants (4.3 MB for the
  // H = 64 case).
  KJIT_ASSIGN_OR_RETURN(std::unique_ptr<LaunchRing> ring, LaunchRing::Open(x, 16u << 20));
  for (const auto& spec : Cases()) {
    const reference::MlaCase c = reference::MakeCase(spec);
    KJIT_ASSIGN_OR_RETURN(CaseLayout l, UploadCase(c, a.in.get(), a.out.get()));
    for (const char* model : {"mla_verify", "mla_verify_naive"}) {
      for (bool inline_small : {false, true}) {
        KJIT_RETURN_IF_ERROR(CheckCase(x, a, c, l, model, inline_small, ring.get()));
      }
    }
  }
  return absl::OkStatus();
}

// An asynchronous mla_verify request on the arenas' regions, ordered by the "-ready" and "-done"
// events, with the index pointers on the GPU: planned from kjit_max_draft / kjit_max_prefix (here
// the exact bounds, so the plan equals the in-process launch's and o is bitwise comparable).
inference::ModelInferRequest AsyncRequest(Client* x, const reference::MlaCase& c, const CaseLayout& l,
                                          const char* model = "mla_verify") {
  inference::ModelInferRequest req = InferRequest(model, c, l, x->prefix + "-in", x->prefix + "-out", x->device, false);
  auto& params = *req.mutable_parameters();
  params["kjit_wait_event"].set_string_param(x->prefix + "-ready");
  params["kjit_signal_event"].set_string_param(x->prefix + "-done");
  params["kjit_max_draft"].set_int64_param(l.problem.max_draft);
  params["kjit_max_prefix"].set_int64_param(l.problem.max_prefix);
  return req;
}

Status RunAsync(Client* x) {
  KJIT_RETURN_IF_ERROR(OpenSession(x, "e2e_ipc_client async"));
  KJIT_ASSIGN_OR_RETURN(Arenas a, MakeArenas(x, kInBytes, kOutBytes));
  KJIT_ASSIGN_OR_RETURN(ReadyDone events, MakeReadyDone(x));
  const driver::Event &ready = events.ready, &done = events.done;
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  const reference::CaseSpec spec = Cases()[0];
  const reference::MlaCase base = reference::MakeCase(spec);
  KJIT_ASSIGN_OR_RETURN(CaseLayout l, UploadCase(base, a.in.get(), a.out.get()));
  const CUstream cs = x->stream->get();
  for (int iter = 0; iter < 10; ++iter) {
    reference::CaseSpec other = spec;
    other.seed = 100 + iter;
    reference::MlaCase c = base;
    c.q = reference::MakeCase(other).q;  // a new q each time: a launch that did not wait reads a stale one
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemcpyHtoDAsync(a.in->base() + l.input_offsets[0], c.q.data(),
                                                              c.q.size() * 2, cs), "produce q"));
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemsetD8Async(a.out->base() + l.o_offset, 0xFF, l.o_bytes, cs), "poison o"));
    KJIT_RETURN_IF_ERROR(ready.Record(cs));
    const inference::ModelInferRequest req = AsyncRequest(x, c, l);
    inference::ModelInferResponse resp;
    const grpc::Status s = Call(x, req, &resp);
    KJIT_E2E_CHECK(s.ok(), "async ModelInfer: " + s.error_message());
    KJIT_E2E_CHECK(resp.raw_output_contents_size() == resp.outputs_size(), "one raw entry per output");
    std::vector<uint16_t> o(l.o_bytes / 2);
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamWaitEvent(cs, done.get(), 0), "wait for the daemon"));
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemcpyDtoHAsync(o.data(), a.out->base() + l.o_offset, l.o_bytes, cs), "read o"));
    KJIT_RETURN_IF_ERROR(x->stream->Synchronize());
    KJIT_ASSIGN_OR_RETURN(InProcessResult mine, RunInProcess("mla_verify", *x->loaded, x->info, l, a.in->base(), cs));
    KJIT_E2E_CHECK(std::memcmp(o.data(), mine.o.data(), l.o_bytes) == 0,
                   absl::StrCat("async iteration ", iter, ": o differs from the in-process launch"));
  }
  std::printf("PASS async: 10 launches ordered by IPC events, bitwise equal to in-process\n");
  auto input_at = [&](const char* name) -> CUdeviceptr {
    for (size_t k = 0; k < l.inputs.size(); ++k) {
      if (l.inputs[k].name == name) return a.in->base() + l.input_offsets[k];
    }
    return 0;
  };
  // Record "-ready", run one asynchronous launch, then wait for "-done" on the client's stream.
  auto launch = [&](const char* id, const char* model) -> grpc::Status {
    (void)ready.Record(cs);
    inference::ModelInferRequest req = AsyncRequest(x, base, l, model);
    req.set_id(id);
    inference::ModelInferResponse resp;
    const grpc::Status st = Call(x, req, &resp);
    (void)api->cuStreamWaitEvent(cs, done.get(), 0);
    (void)x->stream->Synchronize();  // the launch (if any) has run when this returns
    // The daemon reads a launch's error word a few microseconds after its signal event (a copy and
    // its own completion event follow it on the stream).
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return st;
  };
  // o, where `layout` puts it, equals an in-process launch of `model` with `layout`'s plan.
  auto check_o = [&](const std::string& what, const char* model = "mla_verify",
                     const CaseLayout* layout = nullptr) -> Status {
    const CaseLayout& c = layout != nullptr ? *layout : l;
    std::vector<uint16_t> o(c.o_bytes / 2);
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemcpyDtoH(o.data(), a.out->base() + c.o_offset, c.o_bytes), "read o"));
    KJIT_ASSIGN_OR_RETURN(InProcessResult mine, RunInProcess(model, *x->loaded, x->info, c, a.in->base(), cs));
    KJIT_E2E_CHECK(std::memcmp(o.data(), mine.o.data(), c.o_bytes) == 0, what + ": o differs from the in-process launch");
    return absl::OkStatus();
  };
  // Sends `requests` (asynchronous ones included) in order while the client's stream is held
  // before "-ready" (a stream wait on a host flag, released after the replies or by a watchdog
  // after 3 s), so every reply must come while "-ready" is still pending: the daemon waited for
  // none of the client's work. o, where `layout` puts it, must then equal an in-process launch of
  // `layout`'s plan. Returns the time the replies took, in ms.
  auto held = [&](const std::vector<inference::ModelInferRequest>& requests, const CaseLayout& layout,
                  const std::string& what) -> StatusOr<double> {
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemsetD8Async(a.out->base() + layout.o_offset, 0xFF, layout.o_bytes, cs),
                                       "poison o"));
    KJIT_ASSIGN_OR_RETURN(std::unique_ptr<StreamHold> hold, StreamHold::Start(cs, kHoldLimit));
    KJIT_RETURN_IF_ERROR(ready.Record(cs));
    const auto t0 = std::chrono::steady_clock::now();
    grpc::Status st;
    for (const auto& req : requests) {
      inference::ModelInferResponse resp;
      if (st = Call(x, req, &resp); !st.ok()) break;
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const bool pending = api->cuEventQuery(ready.get()) == CUDA_ERROR_NOT_READY;
    hold->Release();
    KJIT_E2E_CHECK(st.ok(), what + ": ModelInfer behind held client work: " + st.error_message());
    KJIT_E2E_CHECK(pending && ms < kHoldLimit.count(),
                   absl::StrCat(what, ": the replies (", ms, " ms) came after the client's work before '-ready' "
                                "had been released: the daemon waited for it"));
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamWaitEvent(cs, done.get(), 0), "wait for the daemon"));
    KJIT_RETURN_IF_ERROR(x->stream->Synchronize());
    KJIT_RETURN_IF_ERROR(check_o(what, "mla_verify", &layout));
    return ms;
  };
  // The workspace each request's plan needs: the daemon's grows (to whole MiB) only past the largest
  // so far, so the growth check below needs a request larger than every earlier one, and a daemon
  // that no other client has used (tests/gpu/e2e_daemon.sh runs this mode first).
  auto workspace = [&](const CaseLayout& c) -> StatusOr<size_t> {
    KJIT_ASSIGN_OR_RETURN(const kernels::MlaVerifyPlan plan, kernels::PlanMlaVerify(c.problem, x->info));
    return plan.workspace_bytes;
  };
  KJIT_ASSIGN_OR_RETURN(size_t largest_workspace, workspace(l));
  {
    KJIT_ASSIGN_OR_RETURN(const double ms, held({AsyncRequest(x, base, l)}, l, "one launch"));
    std::printf("PASS async: reply in %.3f ms while the client's earlier GPU work was still held\n", ms);
  }
  {
    // Inputs sent inline are staged in a pinned block of the launch's own. The second launch has a
    // 64k-slot prefix and 64 draft tokens, so 4.7 MB of kv_indices and bool mask travel inline: the
    // driver made a copy that large from pageable memory wait for the daemon's stream (measured on
    // the H200 with driver 580; 512 KB did not wait), where the first launch waits for the client's
    // held work. A synchronous call of the same request first makes the daemon's device staging
    // large enough, so that this checks the host side alone.
    reference::CaseSpec ls = spec;
    ls.seed = 77;
    ls.prefix_lens = {65536};
    ls.draft_lens = {64};
    ls.mask = kernels::MaskKind::kBool;
    ls.padded_requests = 0;
    const reference::MlaCase lc = reference::MakeCase(ls);
    KJIT_ASSIGN_OR_RETURN(CaseLayout ll, UploadCase(lc, a.in.get(), a.out.get()));
    KJIT_ASSIGN_OR_RETURN(const size_t inline_workspace, workspace(ll));
    largest_workspace = std::max(largest_workspace, inline_workspace);
    auto inline_request = [&](bool async) {
      inference::ModelInferRequest req = AsyncRequest(x, lc, ll);
      if (!async) {
        req.mutable_parameters()->erase("kjit_wait_event");
        req.mutable_parameters()->erase("kjit_signal_event");
      }
      for (int i = 3; i < req.inputs_size(); ++i) {  // the index pointers, indices and mask inline
        req.mutable_inputs(i)->mutable_parameters()->clear();
        req.add_raw_input_contents(static_cast<const char*>(ll.input_host[i]), ll.inputs[i].byte_size);
      }
      return req;
    };
    {
      inference::ModelInferResponse resp;
      const grpc::Status warm = Call(x, inline_request(false), &resp);
      KJIT_E2E_CHECK(warm.ok(), "synchronous ModelInfer with large inline inputs: " + warm.error_message());
    }
    const inference::ModelInferRequest req = inline_request(true);
    size_t inline_bytes = 0;
    for (const std::string& raw : req.raw_input_contents()) inline_bytes += raw.size();
    KJIT_ASSIGN_OR_RETURN(const double ms, held({AsyncRequest(x, base, l), req}, ll,
                                                absl::StrCat(inline_bytes, " bytes of inline inputs")));
    std::printf("PASS async: %zu bytes of inline inputs staged without waiting (two replies in %.3f ms, client work "
                "still held)\n", inline_bytes, ms);
  }
  {
    // The daemon grows its workspace in stream order: a launch planned for a much larger problem
    // (kjit_max_draft 64, kjit_max_prefix 4M: many splits of 512 rows) replies while the first
    // launch still waits behind the client's held work, and computes what an in-process launch with
    // the same plan computes.
    CaseLayout big = l;
    big.problem.max_draft = kernels::kMlaMaxDraft;
    big.problem.max_prefix = int64_t{1} << 22;
    KJIT_ASSIGN_OR_RETURN(const size_t big_workspace, workspace(big));
    constexpr size_t kMiB = size_t{1} << 20;
    KJIT_E2E_CHECK((big_workspace + kMiB - 1) / kMiB > (largest_workspace + kMiB - 1) / kMiB,
                   absl::StrCat("the growth check's workspace (", big_workspace, " bytes) must exceed every earlier "
                                "request's (", largest_workspace, ") in whole MiB"));
    KJIT_ASSIGN_OR_RETURN(const double ms, held({AsyncRequest(x, base, l), AsyncRequest(x, base, big)}, big,
                                                "a launch that grows the workspace"));
    std::printf("PASS async: a launch that grows the workspace replies without waiting (two replies in %.3f ms)\n", ms);
  }
  {
    // The same asynchronous launch through a launch ring.
    KJIT_ASSIGN_OR_RETURN(std::unique_ptr<LaunchRing> ring, LaunchRing::Open(x, 1u << 20));
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemsetD8Async(a.out->base() + l.o_offset, 0xFF, l.o_bytes, cs), "poison o"));
    KJIT_RETURN_IF_ERROR(ready.Record(cs));
    inference::ModelInferResponse resp;
    const grpc::Status st = ring->Infer(AsyncRequest(x, base, l).SerializeAsString(), &resp);
    KJIT_E2E_CHECK(st.ok(), "async ModelInfer through the launch ring: " + st.error_message());
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamWaitEvent(cs, done.get(), 0), "wait for the daemon"));
    KJIT_RETURN_IF_ERROR(x->stream->Synchronize());
    KJIT_RETURN_IF_ERROR(check_o("through the launch ring"));
    std::printf("PASS async through the launch ring\n");
  }
  // Kernel errors of an asynchronous launch: its reply comes before the kernels run, so they are
  // reported to the next launch that names one of its events (which does not run), and the launch
  // after that runs. A kv_indices entry >= S, then a qo_indptr past N, then the oracle's copied
  // error word with a kv_indices entry >= S.
  const CUdeviceptr slot3 = input_at("kv_indices") + 3 * sizeof(int64_t);
  const CUdeviceptr qo1 = input_at("qo_indptr") + sizeof(int32_t);
  KJIT_E2E_CHECK(slot3 != 3 * sizeof(int64_t) && qo1 != sizeof(int32_t) && base.kv_indices.size() > 3,
                 "the case has kv_indices and qo_indptr");
  const int64_t bad_slot = static_cast<int64_t>(base.kv_cache.size() / kernels::kMlaKDim);
  const int32_t bad_qo = static_cast<int32_t>(base.q.size() / (static_cast<size_t>(base.spec.num_heads) * kernels::kMlaKDim)) + 5;
  struct Poke {
    CUdeviceptr at;
    const void* bad;
    const void* good;
    size_t bytes;
    const char* expect;
    const char* model;  // mla_verify stores its error word into mapped memory; the oracle's is copied
  };
  for (const Poke& k : {Poke{slot3, &bad_slot, &base.kv_indices[3], sizeof(int64_t), "kv_indices", "mla_verify"},
                        Poke{qo1, &bad_qo, &base.qo_indptr[1], sizeof(int32_t), "indptr", "mla_verify"},
                        Poke{slot3, &bad_slot, &base.kv_indices[3], sizeof(int64_t), "kv_indices", "mla_verify_naive"}}) {
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemcpyHtoDAsync(k.at, k.bad, k.bytes, cs), "poke"));
    const grpc::Status queued = launch("bad-input", k.model);
    KJIT_E2E_CHECK(queued.ok(), absl::StrCat("async launch with a bad ", k.expect, " is queued: ", queued.error_message()));
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemcpyHtoDAsync(k.at, k.good, k.bytes, cs), "restore"));
    const grpc::Status next = launch("next", k.model);
    KJIT_E2E_CHECK(next.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
                       next.error_message().find(k.expect) != std::string::npos &&
                       next.error_message().find("bad-input") != std::string::npos,
                   absl::StrCat("the launch after an async bad ", k.expect, " gave code ", next.error_code(), ": ",
                                next.error_message()));
    const grpc::Status after = launch("after", k.model);
    KJIT_E2E_CHECK(after.ok(), "the launch after the report runs: " + after.error_message());
    KJIT_RETURN_IF_ERROR(check_o(absl::StrCat(k.model, " after the ", k.expect, " report"), k.model));
    std::printf("PASS async %s, bad %s: reported to the next launch naming its events (%s)\n", k.model, k.expect,
                next.error_message().c_str());
  }
  {
    // A report filed under events that are then unregistered and registered again under the same
    // names reaches no launch of the new registrations.
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemcpyHtoDAsync(slot3, &bad_slot, sizeof(bad_slot), cs), "poke"));
    KJIT_E2E_CHECK(launch("bad-input", "mla_verify").ok(), "async launch with a bad kv_indices is queued");
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemcpyHtoDAsync(slot3, &base.kv_indices[3], sizeof(int64_t), cs), "restore"));
    for (const std::string& name : {x->prefix + "-ready", x->prefix + "-done"}) {
      grpc::ClientContext ctx;
      if (!x->session.empty()) ctx.AddMetadata("kjit-session", x->session);
      kjit::v1::UnregisterEventRequest req;
      req.set_name(name);
      kjit::v1::UnregisterEventResponse resp;
      const grpc::Status st = x->kernels->UnregisterEvent(&ctx, req, &resp);
      KJIT_E2E_CHECK(st.ok(), "UnregisterEvent " + name + ": " + st.error_message());
    }
    KJIT_RETURN_IF_ERROR(RegisterEvent(x, x->prefix + "-ready", ready.get()));
    KJIT_RETURN_IF_ERROR(RegisterEvent(x, x->prefix + "-done", done.get()));
    const grpc::Status fresh = launch("fresh", "mla_verify");
    KJIT_E2E_CHECK(fresh.ok(), "a launch on re-registered events got an earlier registration's report: " +
                                   fresh.error_message());
    KJIT_RETURN_IF_ERROR(check_o("on re-registered events"));
    std::printf("PASS async: a report does not outlive its events' registration\n");
  }
  // Asynchronous launches need every output in a CUDA region; an unknown event is NOT_FOUND.
  inference::ModelInferRequest bad = InferRequest("mla_verify", base, l, x->prefix + "-in", x->prefix + "-out", x->device, true);
  (*bad.mutable_parameters())["kjit_signal_event"].set_string_param(x->prefix + "-done");
  inference::ModelInferResponse resp;
  KJIT_E2E_CHECK(Call(x, bad, &resp).error_code() == grpc::StatusCode::INVALID_ARGUMENT, "async with inline output");
  inference::ModelInferRequest unknown = InferRequest("mla_verify", base, l, x->prefix + "-in", x->prefix + "-out", x->device, false);
  (*unknown.mutable_parameters())["kjit_wait_event"].set_string_param("no-such-event");
  KJIT_E2E_CHECK(Call(x, unknown, &resp).error_code() == grpc::StatusCode::NOT_FOUND, "unknown event");
  std::printf("PASS async error codes\n");
  return absl::OkStatus();
}

Status RunVictim(Client* x) {
  x->prefix = "victim";
  KJIT_RETURN_IF_ERROR(OpenSession(x, "e2e_ipc_client victim"));
  KJIT_ASSIGN_OR_RETURN(Arenas a, MakeArenas(x, kInBytes, kOutBytes));
  KJIT_ASSIGN_OR_RETURN(driver::Event ev, driver::Event::Create(CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
  KJIT_RETURN_IF_ERROR(RegisterEvent(x, "victim-ev", ev.get()));
  const reference::MlaCase c = reference::MakeCase(Cases()[1]);
  KJIT_ASSIGN_OR_RETURN(CaseLayout l, UploadCase(c, a.in.get(), a.out.get()));
  const inference::ModelInferRequest req = InferRequest("mla_verify", c, l, "victim-in", "victim-out", x->device, false);
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) {  // until kill -9
    inference::ModelInferResponse resp;
    const grpc::Status s = Call(x, req, &resp);
    KJIT_E2E_CHECK(s.ok(), "victim launch: " + s.error_message());
  }
}

Status RunAfterKill(Client* x) {
  // The killed client's regions were its session's (unseen here): they are released when their
  // names are free again, which registering our own under them shows.
  std::vector<std::unique_ptr<CudaArena>> mine;
  for (const char* name : {"victim-in", "victim-out"}) {
    KJIT_ASSIGN_OR_RETURN(std::unique_ptr<CudaArena> arena, CudaArena::Create(4096));
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    grpc::Status st;
    for (;;) {
      KJIT_ASSIGN_OR_RETURN(st, TryRegisterCuda(x, name, *arena));
      if (st.error_code() != grpc::StatusCode::ALREADY_EXISTS || std::chrono::steady_clock::now() > give_up) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    KJIT_E2E_CHECK(st.ok(), absl::StrCat("the killed client's region ", name, " is still registered: ", st.error_message()));
    mine.push_back(std::move(arena));
  }
  // Its event name is free again: registering our own under it succeeds.
  KJIT_ASSIGN_OR_RETURN(driver::Event ev, driver::Event::Create(CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
  KJIT_RETURN_IF_ERROR(OpenSession(x, "e2e_ipc_client after-kill"));
  KJIT_RETURN_IF_ERROR(RegisterEvent(x, "victim-ev", ev.get()));
  x->prefix = "after";
  KJIT_ASSIGN_OR_RETURN(Arenas a, MakeArenas(x, kInBytes, kOutBytes));
  const reference::MlaCase c = reference::MakeCase(Cases()[0]);
  KJIT_ASSIGN_OR_RETURN(CaseLayout l, UploadCase(c, a.in.get(), a.out.get()));
  KJIT_RETURN_IF_ERROR(CheckCase(x, a, c, l, "mla_verify", false));
  std::printf("PASS after kill -9: regions and event released, daemon serving\n");
  return absl::OkStatus();
}

Status RunCross(Client* x, int other_device) {
  KJIT_E2E_CHECK(other_device >= 0 && other_device != x->device, "cross needs --other-device, another GPU");
  KJIT_RETURN_IF_ERROR(OpenSession(x, "e2e_ipc_client cross"));
  KJIT_ASSIGN_OR_RETURN(Arenas a, MakeArenas(x, kInBytes, kOutBytes));
  const reference::MlaCase c = reference::MakeCase(Cases()[0]);
  KJIT_ASSIGN_OR_RETURN(CaseLayout l, UploadCase(c, a.in.get(), a.out.get()));
  const inference::ModelInferRequest req =
      InferRequest("mla_verify", c, l, x->prefix + "-in", x->prefix + "-out", other_device, false);
  inference::ModelInferResponse resp;
  const grpc::Status s = Call(x, req, &resp);
  KJIT_E2E_CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT,
                 absl::StrCat("regions of GPU ", x->device, " used on GPU ", other_device, ": got code ",
                              static_cast<int>(s.error_code()), " ", s.error_message()));
  std::printf("PASS cross: regions of GPU %d refused on GPU %d: %s\n", x->device, other_device,
              s.error_message().c_str());
  KJIT_RETURN_IF_ERROR(CheckCase(x, a, c, l, "mla_verify", false));  // still fine on their own GPU
  return absl::OkStatus();
}

Status RunWrongDevice(Client* x) {
  KJIT_ASSIGN_OR_RETURN(std::unique_ptr<CudaArena> arena, CudaArena::Create(1u << 20));
  KJIT_ASSIGN_OR_RETURN(const grpc::Status s, TryRegisterCuda(x, x->prefix + "-in", *arena));
  KJIT_E2E_CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT,
                 absl::StrCat("memory of another GPU registered as device_id ", x->device, ": got code ",
                              static_cast<int>(s.error_code()), " ", s.error_message()));
  std::printf("PASS wrong-device: %s\n", s.error_message().c_str());
  return absl::OkStatus();
}

Status RunDemo(Client* x) {
  x->prefix = "demo";
  KJIT_RETURN_IF_ERROR(OpenSession(x, "kjit demo"));
  KJIT_ASSIGN_OR_RETURN(Arenas a, MakeArenas(x, kInBytes, kOutBytes));
  const reference::MlaCase c = reference::MakeCase(Cases()[0]);
  KJIT_ASSIGN_OR_RETURN(CaseLayout l, UploadCase(c, a.in.get(), a.out.get()));
  return CheckCase(x, a, c, l, "mla_verify", false);
}

}  // namespace
}  // namespace kjit::e2e

int main(int argc, char** argv) {
  std::string target, mode = "sync", prefix = "e2e";
  int device = 0, other_device = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--target") target = argv[i + 1];
    else if (flag == "--mode") mode = argv[i + 1];
    else if (flag == "--device") device = std::atoi(argv[i + 1]);
    else if (flag == "--other-device") other_device = std::atoi(argv[i + 1]);
    else if (flag == "--prefix") prefix = argv[i + 1];
    else {
      std::fprintf(stderr,
                   "usage: e2e_ipc_client --target T [--mode sync|async|ring|victim|after-kill|demo|cross|wrong-device|stuck] "
                   "[--device N] [--other-device M] [--prefix NAME]\n");
      return 2;
    }
  }
  if (target.empty()) {
    std::fprintf(stderr, "e2e_ipc_client: --target is required (e.g. unix:///run/kjit/kjitd.sock)\n");
    return 2;
  }
  kjit::e2e::Client x;
  kjit::Status s = kjit::e2e::Connect(&x, target, device);
  x.prefix = prefix;
  if (s.ok()) {
    if (mode == "sync") s = kjit::e2e::RunSync(&x);
    else if (mode == "async") s = kjit::e2e::RunAsync(&x);
    else if (mode == "ring") s = kjit::e2e::RunRing(&x);
    else if (mode == "victim") s = kjit::e2e::RunVictim(&x);
    else if (mode == "after-kill") s = kjit::e2e::RunAfterKill(&x);
    else if (mode == "demo") s = kjit::e2e::RunDemo(&x);
    else if (mode == "cross") s = kjit::e2e::RunCross(&x, other_device);
    else if (mode == "wrong-device") s = kjit::e2e::RunWrongDevice(&x);
    else if (mode == "stuck") s = kjit::e2e::RunStuck(&x);
    else s = absl::InvalidArgumentError("unknown mode " + mode);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "e2e_ipc_client %s: FAIL: %s\n", mode.c_str(), s.ToString().c_str());
    return 1;
  }
  std::printf("e2e_ipc_client %s: OK\n", mode.c_str());
  return 0;
}
