#include "runtime/launch/launcher.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "runtime/common/client_text.h"
#include "runtime/common/log.h"
#include "runtime/ipc/sigbus_guard.h"
#include "runtime/kernels/registry.h"
#include "runtime/launch/launch_state.h"

namespace kjit::launch {

enum LaunchParam : int { kParamDevice, kParamWaitEvent, kParamSignalEvent, kNumLaunchParams };

namespace {

using internal::LaunchState;
using internal::Located;
using Where = Located::Where;

constexpr size_t kAlign = 256;
// Every staged tensor gets its own nonzero address, empty ones included.
size_t AlignUp(size_t x) { return (std::max<size_t>(x, 1) + kAlign - 1) & ~(kAlign - 1); }

uint64_t NeededBytes(const kernels::TensorDesc& t) {
  uint64_t n = kernels::DatatypeSize(t.datatype);
  for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
  return n;
}

}  // namespace

namespace internal {

Status Check(const LaunchRequest& r, LaunchState* s, LaunchResult* result) {
  KJIT_ASSIGN_OR_RETURN(s->family, kernels::FindFamily(r.model));
  result->family = s->family;
  std::vector<kernels::ParamSchema> schemas(s->family->params().begin(), s->family->params().end());
  const size_t family_params = schemas.size();
  schemas.insert(schemas.end(), LaunchParamSchema().begin(), LaunchParamSchema().end());
  KJIT_ASSIGN_OR_RETURN(kernels::TypedParams params, kernels::ConvertParams(schemas, r.params));
  const kernels::TypedParams launch_params(params.begin() + family_params, params.end());
  params.resize(family_params);
  if (const int64_t* d = std::get_if<int64_t>(&launch_params[kParamDevice])) s->device = *d;
  if (const auto* w = std::get_if<std::string>(&launch_params[kParamWaitEvent])) s->wait_name = *w;
  if (const auto* e = std::get_if<std::string>(&launch_params[kParamSignalEvent])) s->signal_name = *e;

  std::vector<kernels::TensorDesc> in, out;
  for (const TensorArg& t : r.inputs) in.push_back(t.desc);
  for (const TensorArg& t : r.outputs) out.push_back(t.desc);
  KJIT_ASSIGN_OR_RETURN(s->launch, s->family->Check(in, out, params));
  result->outputs = std::move(out);
  return absl::OkStatus();
}

}  // namespace internal

namespace {

// A synchronous launch leaves its stream synchronized; what it queued is waited for on an error.
using Queued = internal::QueuedWork;
using Clock = std::chrono::steady_clock;

// Polls `query` (a cuEventQuery or cuStreamQuery: CUDA_SUCCESS once the work has run) until it
// succeeds or `deadline` passes: OK, DEADLINE_EXCEEDED (its message left to the caller), or the
// driver's error. It spins for the first 20 ms, as a synchronization in the driver's default
// scheduling would, so a launch's reply is not delayed past its work; then it naps 200 us at a time.
template <class Query>
Status PollUntil(Query query, const char* what, Clock::time_point deadline) {
  constexpr auto kSpin = std::chrono::milliseconds(20);
  constexpr auto kNap = std::chrono::microseconds(200);
  const Clock::time_point start = Clock::now();
  for (;;) {
    const CUresult r = query();
    if (r == CUDA_SUCCESS) return absl::OkStatus();
    if (r != CUDA_ERROR_NOT_READY) return driver::Check(r, what);
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return absl::DeadlineExceededError(what);
    if (now - start >= kSpin) std::this_thread::sleep_for(std::min<Clock::duration>(kNap, deadline - now));
  }
}

int64_t Ms(std::chrono::milliseconds t) { return static_cast<int64_t>(t.count()); }

// Where each tensor in system memory goes in the staging buffers (offsets by request position), and
// the totals. Placed twice: before any GPU is involved, for the cap (CheckStagedBytes), and again
// when the launch is staged, because a synchronous launch's device-resident index pointers are
// read back and checked in between, and are staged from those checked host bytes from then on
// (internal::CheckIndexPointers makes them host tensors).
struct Placement {
  std::vector<size_t> in_off, out_off;
  size_t in_total = 0, total = 0;
};

Placement Place(const LaunchState& s) {
  const LaunchRequest& r = *s.request;
  Placement p;
  p.in_off.assign(s.inputs.size(), 0);
  p.out_off.assign(s.outputs.size(), 0);
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    if (s.inputs[i].where == Where::kCuda) continue;
    p.in_off[i] = p.total;
    p.total += AlignUp(s.inputs[i].bytes);
  }
  p.in_total = p.total;
  for (size_t i = 0; i < s.outputs.size(); ++i) {
    if (s.outputs[i].where == Where::kCuda) continue;
    p.out_off[i] = p.total;
    p.total += AlignUp(NeededBytes(r.outputs[i].desc));
  }
  return p;
}

// RESOURCE_EXHAUSTED when the launch would stage more than `max` bytes. The cap is on the tensors the
// client put in system memory: index pointers read back from the GPU are not counted (at most three
// arrays of B + 1 entries, B <= 65535).
Status CheckStagedBytes(const Placement& p, uint64_t max) {
  if (p.total <= max) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "this launch's tensors in system memory (inputs, and outputs' byte sizes) total ", p.total,
      " bytes, more than kjitd stages for one launch (", max,
      ", --max-staging-bytes): put the large ones in CUDA shared memory"));
}

// Device memory of one launch: its placement (at staging time), the staging buffers, the workspace,
// the error word.
struct Staged : Placement {
  CUdeviceptr staging = 0, workspace = 0;
  uint8_t* pinned = nullptr;
  std::shared_ptr<uint8_t> async_pinned;  // an asynchronous launch's own page-locked block
  MappedWord word;                        // where the launch's error word lands
};

// Step 5: the placement, device staging and workspace, the host side of the copies, the copy in.
Status Stage(DeviceRuntime* dev, const LaunchState& s, const kernels::LaunchNeeds& needs, Staged* st,
             Queued* queued) {
  static_cast<Placement&>(*st) = Place(s);
  if (st->total > 0) {
    KJIT_ASSIGN_OR_RETURN(st->staging, dev->staging().Staging(st->total));
  }
  KJIT_ASSIGN_OR_RETURN(st->workspace, dev->staging().Workspace(needs.workspace_bytes));
  // Inputs are staged in pinned host memory (same offsets as the device staging): one contiguous
  // host-to-device copy in (from pageable memory the driver may first wait for everything queued on
  // the stream; on the H200 it did for 4.7 MB), and for a synchronous launch one device-to-host copy
  // out. An asynchronous launch returns before its copy runs, so its inputs get a pinned block of
  // their own, held until the launch is reaped (its outputs are all in CUDA regions).
  if (s.async() && st->in_total > 0) {
    KJIT_ASSIGN_OR_RETURN(st->async_pinned, dev->staging().AcquireAsync(st->in_total, dev->in_flight().size() == 0));
    st->pinned = st->async_pinned.get();
  } else if (!s.async() && st->total > 0) {
    KJIT_ASSIGN_OR_RETURN(st->pinned, dev->staging().Pinned(st->total));
  }
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    const Located& l = s.inputs[i];
    if (l.where == Where::kCuda || l.bytes == 0) continue;
    // System memory is copied under the SIGBUS guard (a truncated client object must never fault
    // the daemon or the driver).
    if (l.where == Where::kShared) {
      KJIT_RETURN_IF_ERROR(ipc::GuardedCopy(st->pinned + st->in_off[i], l.host, l.bytes,
                                            internal::TensorWhere(s, i).c_str()));
    } else {
      std::memcpy(st->pinned + st->in_off[i], internal::HostBytes(l), l.bytes);
    }
  }
  if (st->pinned != nullptr && st->in_total > 0) {
    queued->armed = true;
    KJIT_RETURN_IF_ERROR(driver::Check(
        queued->api->cuMemcpyHtoDAsync(st->staging, st->pinned, st->in_total, queued->stream), "staging the inputs"));
  }
  return absl::OkStatus();
}

kernels::LaunchAddresses Addresses(const LaunchState& s, const kernels::LaunchNeeds& needs, const Staged& st) {
  kernels::LaunchAddresses a;
  auto addr = [&](const std::vector<Located>& located, const std::vector<size_t>& off, int i) -> CUdeviceptr {
    if (i < 0) return 0;
    return located[i].where == Where::kCuda ? located[i].device : st.staging + off[i];
  };
  for (int i : s.launch->input_slots()) a.inputs.push_back(addr(s.inputs, st.in_off, i));
  for (int i : s.launch->output_slots()) a.outputs.push_back(addr(s.outputs, st.out_off, i));
  a.workspace = st.workspace;
  a.error_word = needs.stores_error_word ? st.word.device : 0;
  return a;
}

// Step 7, asynchronous: the launch's references stay until it has run; its error word is read then.
Status HoldUntilRun(DeviceRuntime* dev, LaunchState* s, Staged* st, LaunchResult* result) {
  std::vector<std::shared_ptr<const void>> refs = {s->wait, s->signal};
  for (const Located& l : s->inputs) refs.push_back(l.region);
  for (const Located& l : s->outputs) refs.push_back(l.region);
  if (st->async_pinned) refs.push_back(std::move(st->async_pinned));
  InFlightLaunches::ErrorWatch watch;
  watch.word = st->word.host;
  if (s->wait) {
    watch.events.push_back({s->wait->name, s->wait});
    watch.wait_event = s->wait->name;
  }
  watch.events.push_back({s->signal->name, s->signal});
  watch.report = [model = s->request->model, id = s->request->id, event = s->signal->name,
                  launch = std::shared_ptr<const kernels::FamilyLaunch>(std::move(s->launch))](uint32_t err) {
    return absl::StrCat("asynchronous ", model, " launch (id '", ClientText(id), "', kjit_signal_event '",
                        ClientText(event), "') failed: ", launch->ErrorStatus(err).message());
  };
  KJIT_RETURN_IF_ERROR(dev->in_flight().Hold(std::move(refs), std::move(watch)));
  result->output_bytes.assign(s->outputs.size(), std::string());
  return absl::OkStatus();
}

// Why a synchronous launch's stream had not run what it waited for within `timeout`.
std::string StuckWhy(DeviceRuntime* dev, const LaunchState& s, std::chrono::milliseconds timeout,
                     const char* what) {
  const std::string waits_on = dev->in_flight().OldestPendingWait();
  return absl::StrCat(
      "a synchronous ", s.request->model, " launch (id '", ClientText(s.request->id), "') waited ", Ms(timeout),
      " ms (kjitd --launch-timeout-ms) for ", what, " on GPU ", dev->info().ordinal,
      waits_on.empty() ? std::string(", which is still busy")
                       : absl::StrCat(", whose stream still waits for kjit_wait_event '", ClientText(waits_on),
                                      "' of an earlier asynchronous launch"));
}

// A synchronous launch found the stream busy past its deadline before it queued anything: the GPU
// refuses launches until the stream has drained (instead of each waiting out its deadline).
Status BlockedBehind(DeviceRuntime* dev, const LaunchState& s, std::chrono::milliseconds timeout) {
  const std::string why = StuckWhy(dev, s, timeout, "earlier launches");
  dev->Block(why);
  Log(LogLevel::kWarn, absl::StrCat(why, "; launches are refused until that stream drains"));
  return absl::DeadlineExceededError(absl::StrCat(why, ": nothing was launched, and the GPU takes no launches "
                                                  "until its stream has drained"));
}

// A synchronous launch whose own work has not run by its deadline: what the work uses (regions,
// events) is held until the stream has run it, the GPU refuses launches until then, and the caller
// is told why. The staging and the synchronous error word stay untouched meanwhile: every later
// launch is refused before it could use them.
Status Abandon(DeviceRuntime* dev, LaunchState* s, Queued* queued, std::chrono::milliseconds timeout) {
  std::vector<std::shared_ptr<const void>> refs = {s->wait, s->signal};
  for (const Located& l : s->inputs) refs.push_back(l.region);
  for (const Located& l : s->outputs) refs.push_back(l.region);
  const std::string why = StuckWhy(dev, *s, timeout, "its kernels");
  if (Status held = dev->in_flight().Hold(std::move(refs), InFlightLaunches::ErrorWatch{}); !held.ok()) {
    return held;  // `queued` still armed: the caller waits for the stream before releasing them
  }
  queued->armed = false;
  dev->Block(why);
  Log(LogLevel::kWarn, absl::StrCat(why, "; launches are refused until that stream drains"));
  return absl::DeadlineExceededError(absl::StrCat(why, ": the launch stays queued, its outputs may still be "
                                                  "written, and the GPU takes no launches until it has run"));
}

// Step 7, synchronous: outputs and the error word come back once the stream has run the launch,
// waited for until `deadline`.
Status FinishSync(const driver::Api* api, DeviceRuntime* dev, LaunchState* state, const Staged& st, Clock::time_point t0,
                  Clock::time_point deadline, std::chrono::milliseconds timeout, Queued* queued,
                  LaunchResult* result) {
  const CUstream stream = dev->stream();
  if (st.total > st.in_total) {
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemcpyDtoHAsync(st.pinned + st.in_total, st.staging + st.in_total,
                                                              st.total - st.in_total, stream),
                                       "reading the outputs"));
  }
  const Status ran = PollUntil([&] { return api->cuStreamQuery(stream); }, "cuStreamQuery(launch)", deadline);
  if (ran.code() == absl::StatusCode::kDeadlineExceeded) return Abandon(dev, state, queued, timeout);
  KJIT_RETURN_IF_ERROR(ran);
  queued->armed = false;
  const LaunchState& s = *state;
  result->compute_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  KJIT_RETURN_IF_ERROR(s.launch->ErrorStatus(*static_cast<volatile uint32_t*>(st.word.host)));
  result->output_bytes.assign(s.outputs.size(), std::string());
  for (size_t i = 0; i < s.outputs.size(); ++i) {
    const Located& l = s.outputs[i];
    const uint64_t n = NeededBytes(s.request->outputs[i].desc);
    if (l.where == Where::kCuda || n == 0) continue;
    const uint8_t* from = st.pinned + st.out_off[i];
    if (l.where == Where::kHost) {
      result->output_bytes[i].assign(reinterpret_cast<const char*>(from), n);
    } else {  // system memory is written under the SIGBUS guard
      KJIT_RETURN_IF_ERROR(ipc::GuardedCopy(const_cast<uint8_t*>(l.host), from, n,
                                            absl::StrCat("tensor '", s.request->outputs[i].desc.name, "'").c_str()));
    }
  }
  return absl::OkStatus();
}

// A synchronous launch's kjit_wait_event, waited for on the host before the GPU is locked: an
// event that does not complete fails only this call and holds no lock (the calling thread waits;
// over gRPC a thread of the call's own, grpc_queues.h).
Status WaitEventOnHost(DeviceRuntime* dev, const LaunchState& s, Clock::time_point deadline,
                       std::chrono::milliseconds timeout) {
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  KJIT_RETURN_IF_ERROR(dev->context().MakeCurrent());
  const CUevent event = s.wait->event->get();
  const Status done = PollUntil([&] { return api->cuEventQuery(event); }, "cuEventQuery(kjit_wait_event)", deadline);
  if (done.code() == absl::StatusCode::kDeadlineExceeded) {
    return absl::DeadlineExceededError(absl::StrCat(
        "kjit_wait_event '", ClientText(s.wait_name), "' had not completed after ", Ms(timeout),
        " ms (kjitd --launch-timeout-ms): nothing was launched. Record the event after work that finishes, or "
        "launch asynchronously (kjit_signal_event) to have the GPU wait for it"));
  }
  return done;
}

// Steps 3-7 under the device's lock.
Status RunOnDevice(DeviceRuntime* dev, LaunchState* s, LaunchResult* result, Clock::time_point deadline,
                   std::chrono::milliseconds timeout) {
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  std::lock_guard<std::mutex> lock(dev->mu());
  KJIT_RETURN_IF_ERROR(dev->context().MakeCurrent());
  dev->in_flight().Reap();
  if (dev->kernels() == nullptr) return absl::FailedPreconditionError("kernels not loaded on this GPU");
  KJIT_RETURN_IF_ERROR(dev->CheckUnblocked());
  // An earlier asynchronous launch's kernel errors are known only once it has run: they fail the
  // next launch on this GPU that names one of its events.
  for (const auto& ev : {s->wait, s->signal}) {
    if (!ev) continue;
    const std::string failure = dev->in_flight().TakeFailure(ev->name, ev);
    if (!failure.empty()) {
      return absl::FailedPreconditionError(absl::StrCat("not run: an earlier ", failure,
                                                        " (reported to the next launch that names event '",
                                                        ClientText(ev->name), "')"));
    }
  }
  if (!s->async() && dev->in_flight().size() > 0) {
    // A synchronous launch starts on a drained stream, so nothing below waits on the host for work
    // it did not queue (a staging buffer's growth, the read-back, the finish): an earlier
    // asynchronous launch whose kjit_wait_event never completes costs this call its deadline and
    // blocks the GPU until the stream drains, never a thread and the device's lock for good. With
    // no asynchronous launch in flight the stream has drained already (synchronous launches leave
    // it so), and the check is skipped.
    const Status idle =
        PollUntil([&] { return api->cuStreamQuery(dev->stream()); }, "cuStreamQuery(earlier launches)", deadline);
    if (idle.code() == absl::StatusCode::kDeadlineExceeded) return BlockedBehind(dev, *s, timeout);
    KJIT_RETURN_IF_ERROR(idle);
  }
  // Declared after the lock: an oversized workspace or staging buffer goes before it is released.
  struct TrimStaging {
    DeviceStaging* staging;
    ~TrimStaging() { staging->Trim(); }
  } trim{&dev->staging()};
  Staged st;
  // An asynchronous launch's error word is a word of its own, read when it is reaped.
  struct ReleaseWord {
    ErrorWords* words;
    uint32_t* word = nullptr;
    ~ReleaseWord() {
      if (word != nullptr) words->Release(word);
    }
  } release{&dev->error_words()};
  if (s->async()) {
    KJIT_ASSIGN_OR_RETURN(st.word, dev->error_words().Acquire());
    release.word = st.word.host;
  }
  Queued queued{api, dev->stream()};
  if (internal::IndexPointersOnDevice(*s)) {
    // Asynchronous (the client's wait event may still be producing them), or bounds given: the
    // kernels check them. Otherwise they are read back and checked here.
    if (s->async() || s->launch->has_bounds()) {
      s->launch->AssumeBounds();
    } else {
      KJIT_RETURN_IF_ERROR(internal::ReadBackIndexPointers(dev, s));
    }
  }
  KJIT_ASSIGN_OR_RETURN(const kernels::LaunchNeeds needs, s->launch->Plan(dev->info()));
  KJIT_RETURN_IF_ERROR(Stage(dev, *s, needs, &st, &queued));
  if (!s->async()) {
    KJIT_ASSIGN_OR_RETURN(st.word, dev->error_words().Sync());
  }

  queued.armed = true;
  if (s->wait && s->async()) {  // a synchronous launch's event has completed already (Launcher::Run)
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamWaitEvent(dev->stream(), s->wait->event->get(), 0),
                                       "cuStreamWaitEvent(kjit_wait_event)"));
  }
  const Clock::time_point t0 = Clock::now();
  KJIT_RETURN_IF_ERROR(s->launch->Enqueue(*dev->kernels(), Addresses(*s, needs, st), dev->stream()));
  if (s->signal) {
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuEventRecord(s->signal->event->get(), dev->stream()),
                                       "cuEventRecord(kjit_signal_event)"));
  }
  // The error word, where the kernels did not store it: after the client's signal event (the client
  // does not wait for this copy), and before the synchronous launch's stream synchronization.
  if (!needs.stores_error_word) {
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemcpyDtoHAsync(st.word.host, st.workspace + needs.error_word_offset,
                                                              sizeof(uint32_t), dev->stream()),
                                       "reading the error word"));
  }
  if (s->async()) {
    release.word = nullptr;  // queued: the word belongs to the launch now
    KJIT_RETURN_IF_ERROR(HoldUntilRun(dev, s, &st, result));
    queued.armed = false;
    return absl::OkStatus();
  }
  return FinishSync(api, dev, s, st, t0, deadline, timeout, &queued, result);
}

}  // namespace

std::span<const kernels::ParamSchema> LaunchParamSchema() {
  using Kind = kernels::ParamSchema::Kind;
  static const kernels::ParamSchema* const schema = new kernels::ParamSchema[kNumLaunchParams]{
      {"kjit_device", Kind::kInt},
      {"kjit_wait_event", Kind::kString},
      {"kjit_signal_event", Kind::kString},
  };
  return {schema, kNumLaunchParams};
}

Status Launcher::Run(const LaunchRequest& request, LaunchResult* result) const {
  LaunchState s;
  s.request = &request;
  KJIT_RETURN_IF_ERROR(internal::Check(request, &s, result));
  KJIT_RETURN_IF_ERROR(internal::Locate(*options_.regions, &s));
  KJIT_RETURN_IF_ERROR(CheckStagedBytes(Place(s), max_staging_bytes_.load(std::memory_order_relaxed)));
  // Index pointers in host memory are checked before a GPU is involved; device-resident ones are
  // read back and checked under the device's lock, or left to the kernels.
  if (!internal::IndexPointersOnDevice(s)) KJIT_RETURN_IF_ERROR(internal::CheckIndexPointers(&s));
  KJIT_ASSIGN_OR_RETURN(DeviceRuntime * dev, options_.device(s.device));
  KJIT_RETURN_IF_ERROR(internal::CheckDevice(s, dev->info().ordinal));
  // Each wait has the whole timeout: the event's, then the GPU's.
  const std::chrono::milliseconds timeout = this->timeout();
  if (s.wait && !s.async()) {
    KJIT_RETURN_IF_ERROR(AfterDeviceError(dev, WaitEventOnHost(dev, s, Clock::now() + timeout, timeout)));
  }
  return AfterDeviceError(dev, RunOnDevice(dev, &s, result, Clock::now() + timeout, timeout));
}

Status Launcher::AfterDeviceError(DeviceRuntime* dev, Status error) const {
  if (error.code() != absl::StatusCode::kInternal || !options_.poisoned) return error;
  // A sticky CUDA error poisons the context: every later call fails the same way.
  auto api = driver::Get();
  std::lock_guard<std::mutex> lock(dev->mu());
  if (!api.ok() || !dev->context().MakeCurrent().ok()) return error;
  const CUresult r = (*api)->cuCtxSynchronize();
  if (r == CUDA_SUCCESS) return error;
  options_.poisoned(std::string(driver::Check(r, "cuCtxSynchronize").message()));
  return absl::UnavailableError(absl::StrCat(error.message(), "; GPU ", dev->info().ordinal,
                                             "'s context is unusable: kjitd stops so that its supervisor restarts "
                                             "it (retry then; the kernel cache is kept)"));
}

}  // namespace kjit::launch
