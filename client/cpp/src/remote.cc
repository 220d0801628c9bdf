#include "client/cpp/src/remote.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <random>

#include "absl/strings/str_cat.h"
#include "client/cpp/src/context_restorer.h"
#include "client/cpp/src/local_device.h"
#include "runtime/kernels/registry.h"

namespace kjit::client {
namespace {

constexpr char kDeviceUuidMetadataKey[] = "kjit-device-uuid";
constexpr size_t kRingBytes = size_t{1} << 20;

void SetRegion(google::protobuf::Map<std::string, inference::InferParameter>* p, const std::string& region,
               uint64_t offset, uint64_t bytes) {
  (*p)["shared_memory_region"].set_string_param(region);
  (*p)["shared_memory_offset"].set_int64_param(static_cast<int64_t>(offset));
  (*p)["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(bytes));
}

// kjitd's tensors are row-major: a strided view cannot travel as a region.
Status CheckDense(const kernels::TensorDesc& t) {
  int64_t want = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    if (t.shape[i] > 1 && i < t.strides.size() && t.strides[i] != want) {
      return absl::UnimplementedError(absl::StrCat("tensor '", t.name,
                                                   "' is a strided view; the ring and remote modes send dense "
                                                   "tensors only (make it contiguous, or use the in-process mode)"));
    }
    want *= t.shape[i];
  }
  return absl::OkStatus();
}

void SetParam(inference::ModelInferRequest* r, const kernels::Param& p) {
  inference::InferParameter& out = (*r->mutable_parameters())[p.name];
  std::visit(
      [&out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) out.set_bool_param(v);
        if constexpr (std::is_same_v<T, int64_t>) out.set_int64_param(v);
        if constexpr (std::is_same_v<T, uint64_t>) out.set_uint64_param(v);
        if constexpr (std::is_same_v<T, double>) out.set_double_param(v);
        if constexpr (std::is_same_v<T, std::string>) out.set_string_param(v);
      },
      p.value);
}

}  // namespace

StatusOr<std::unique_ptr<RemoteLauncher>> RemoteLauncher::Create(DaemonLink* link, std::string_view model, bool ring,
                                                                 bool events) {
  std::unique_ptr<RemoteLauncher> r(new RemoteLauncher(link, std::string(model), events));
  r->want_ring_ = ring;
  if (ring) KJIT_RETURN_IF_ERROR(r->OpenRing());
  return r;
}

void RemoteLauncher::CloseRing() {
  ring_.reset();
  ring_region_.clear();
  if (ring_map_ != nullptr) munmap(ring_map_, ring_bytes_);
  ring_map_ = nullptr;
  if (!ring_key_.empty()) shm_unlink(ring_key_.c_str());
  ring_key_.clear();
}

Status RemoteLauncher::Resync() {
  KJIT_RETURN_IF_ERROR(link_->EnsureSession());
  if (link_->generation() == generation_ && !stale_) {
    // The registrations stand. A ring that went unanswered is replaced (the old one unregistered,
    // so kjitd's poller lets go of it), and one that could not be opened is tried again.
    if (ring_timed_out_) {
      ring_timed_out_ = false;
      UnregisterRing();
      CloseRing();
    }
    if (want_ring_ && !ring_) {
      if (Status s = OpenRing(); !s.ok()) {
        CloseRing();
        return Status(s.code(), absl::StrCat("opening a new launch ring: ", s.message()));
      }
    }
    return absl::OkStatus();
  }
  // kjitd restarted (a new session) or answered NOT_FOUND: register everything again. A NOT_FOUND
  // from a live daemon (a launch that named something it had dropped) must not leave the rest
  // registered under names this client forgets, so they are unregistered first; after a restart
  // those calls answer NOT_FOUND and cost a round trip each.
  if (stale_ && link_->generation() == generation_) UnregisterAll();
  checked_.clear();
  allocations_.clear();
  devices_.clear();  // their events, registered anew by DeviceFor
  CloseRing();
  generation_ = link_->generation();
  stale_ = false;
  ring_timed_out_ = false;
  if (want_ring_) {
    if (Status s = OpenRing(); !s.ok()) {
      CloseRing();
      return Status(s.code(), absl::StrCat("opening a new launch ring after kjitd restarted: ", s.message()));
    }
  }
  return absl::OkStatus();
}

std::string RemoteLauncher::NewName(std::string_view what) {
  // Unique across the clients of this process (several may share one daemon) and across processes
  // whose pids repeat: the daemon's name space is one for every client of a user.
  static std::atomic<uint64_t> counter{0};
  static const uint32_t salt = std::random_device{}();
  return absl::StrCat("kjit-", getpid(), "-", absl::Hex(salt), "-", absl::string_view(what.data(), what.size()), "-",
                      ++counter);
}

Status RemoteLauncher::OpenRing() {
  std::random_device rd;
  ring_key_ = absl::StrCat("/kjit-ring-", getpid(), "-", rd());
  const int fd = shm_open(ring_key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("shm_open(", ring_key_, "): ", strerror(errno)));
  ring_bytes_ = kRingBytes;
  void* map = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(ring_bytes_)) == 0) {
    map = mmap(nullptr, ring_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  const int err = errno;
  close(fd);
  if (map == MAP_FAILED) {
    shm_unlink(ring_key_.c_str());
    ring_key_.clear();
    return absl::UnavailableError(absl::StrCat("mapping the launch ring: ", strerror(err)));
  }
  ring_map_ = map;
  KJIT_ASSIGN_OR_RETURN(ipc::RingClient ring, ipc::RingClient::Create(ring_map_, ring_bytes_));
  const std::string region = NewName("ring");
  {
    auto ctx = link_->Context();
    inference::SystemSharedMemoryRegisterRequest req;
    req.set_name(region);
    req.set_key(ring_key_);
    req.set_byte_size(ring_bytes_);
    inference::SystemSharedMemoryRegisterResponse resp;
    KJIT_RETURN_IF_ERROR(FromGrpc(link_->infer()->SystemSharedMemoryRegister(ctx.get(), req, &resp),
                                  "registering the launch ring"));
  }
  // kjitd has mapped it: the name is no longer needed, and unlinked now it cannot outlive a client
  // killed with SIGKILL (the memory goes with the last mapping).
  shm_unlink(ring_key_.c_str());
  ring_key_.clear();
  ring_region_ = region;  // ours to unregister from here on
  auto ctx = link_->Context();
  kjit::v1::OpenRingRequest req;
  req.set_region(ring_region_);
  kjit::v1::OpenRingResponse resp;
  if (Status s = FromGrpc(link_->kernels()->OpenRing(ctx.get(), req, &resp), "OpenRing"); !s.ok()) {
    UnregisterRing();  // else kjitd keeps the region (without a session, for good)
    ring_region_.clear();
    return s;
  }
  ring_.emplace(ring);
  return absl::OkStatus();
}

namespace {
// Whether kjitd answered (any status but a deadline run out or no connection).
bool Answered(const grpc::Status& s) {
  return s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED && s.error_code() != grpc::StatusCode::UNAVAILABLE;
}
}  // namespace

bool RemoteLauncher::UnregisterCuda(const std::string& region) {
  auto ctx = link_->Context();
  inference::CudaSharedMemoryUnregisterRequest req;
  req.set_name(region);
  inference::CudaSharedMemoryUnregisterResponse resp;
  return Answered(link_->infer()->CudaSharedMemoryUnregister(ctx.get(), req, &resp));
}

bool RemoteLauncher::UnregisterRing() {
  if (ring_region_.empty()) return true;
  auto ctx = link_->Context();
  inference::SystemSharedMemoryUnregisterRequest req;
  req.set_name(ring_region_);
  inference::SystemSharedMemoryUnregisterResponse resp;
  return Answered(link_->infer()->SystemSharedMemoryUnregister(ctx.get(), req, &resp));
}

void RemoteLauncher::UnregisterAll() {
  // Best effort within the deadline: after a restart kjitd knows none of them (NOT_FOUND, at once),
  // and a session releases everything anyway when the client goes. A daemon that leaves one call
  // unanswered is not asked the rest: a stuck daemon costs one deadline, not one per registration.
  bool answering = UnregisterRing();
  for (const auto& [base, a] : allocations_) {
    if (!answering) return;
    answering = UnregisterCuda(a.region);
  }
  for (const auto& [ordinal, d] : devices_) {
    for (const std::string& name : {d->ready_name, d->done_name}) {
      if (name.empty()) continue;
      if (!answering) return;
      auto ctx = link_->Context();
      kjit::v1::UnregisterEventRequest req;
      req.set_name(name);
      kjit::v1::UnregisterEventResponse resp;
      answering = Answered(link_->kernels()->UnregisterEvent(ctx.get(), req, &resp));
    }
  }
}

RemoteLauncher::~RemoteLauncher() {
  UnregisterAll();
  CloseRing();
}

StatusOr<RemoteLauncher::Device*> RemoteLauncher::DeviceFor(int64_t ordinal) {
  if (auto it = devices_.find(ordinal); it != devices_.end()) return it->second.get();
  KJIT_ASSIGN_OR_RETURN(const driver::DeviceInfo mine, LocalDevice(ordinal));
  auto d = std::make_unique<Device>();
  d->uuid = mine.uuid;
  // The daemon numbers GPUs its own way (its CUDA_VISIBLE_DEVICES): find ours by UUID.
  KJIT_ASSIGN_OR_RETURN(kjit::v1::ListDevicesResponse theirs, link_->ListDevices());
  bool found = false;
  for (const auto& dev : theirs.devices()) {
    if (dev.uuid() == d->uuid) {
      d->daemon_ordinal = dev.ordinal();
      found = true;
    }
  }
  if (!found) {
    return absl::FailedPreconditionError(absl::StrCat(
        "GPU ", ordinal, " (", d->uuid, ") is not one of kjitd's",
        theirs.devices_size() == 0 ? absl::StrCat(" (it runs compile-only: ", theirs.compile_only_reason(), ")") : ""));
  }
  KJIT_ASSIGN_OR_RETURN(driver::Context ctx, driver::Context::RetainPrimary(static_cast<int>(ordinal)));
  d->context.emplace(std::move(ctx));
  if (events_) {
    KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
    KJIT_RETURN_IF_ERROR(d->context->MakeCurrent());
    for (auto [event, name, what] : {std::tuple{&d->ready, &d->ready_name, "ready"}, std::tuple{&d->done, &d->done_name, "done"}}) {
      KJIT_ASSIGN_OR_RETURN(driver::Event e, driver::Event::Create(CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
      CUipcEventHandle handle;
      KJIT_RETURN_IF_ERROR(driver::Check(api->cuIpcGetEventHandle(&handle, e.get()), "cuIpcGetEventHandle"));
      *name = NewName(what);
      auto rctx = link_->Context();
      rctx->AddMetadata(kDeviceUuidMetadataKey, d->uuid);
      kjit::v1::RegisterEventRequest req;
      req.set_name(*name);
      req.set_raw_handle(handle.reserved, sizeof(handle.reserved));
      req.set_device_id(d->daemon_ordinal);
      kjit::v1::RegisterEventResponse resp;
      KJIT_RETURN_IF_ERROR(FromGrpc(link_->kernels()->RegisterEvent(rctx.get(), req, &resp), "RegisterEvent"));
      event->emplace(std::move(e));
    }
  }
  return devices_.emplace(ordinal, std::move(d)).first->second.get();
}

StatusOr<std::pair<std::string, uint64_t>> RemoteLauncher::RegionFor(CUdeviceptr ptr, uint64_t bytes,
                                                                      const Device& d) {
  // Tensors of one call often share an allocation: one driver query per allocation and call.
  for (const Allocation* a : checked_) {
    if (ptr >= a->base && ptr - a->base + bytes <= a->size) return std::pair{a->region, ptr - a->base};
  }
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  CUdeviceptr base = 0;
  size_t size = 0;
  unsigned long long buffer_id = 0;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_BUFFER_ID};
  void* values[] = {&base, &size, &buffer_id};
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuPointerGetAttributes(3, attrs, values, ptr), "cuPointerGetAttributes"));
  if (base == 0 || ptr < base || ptr - base + bytes > size) {
    return absl::InvalidArgumentError("a tensor is not inside one CUDA allocation");
  }
  auto it = allocations_.find(base);
  if (it != allocations_.end()) {
    if (it->second.buffer_id == buffer_id && it->second.size == size) {
      checked_.push_back(&it->second);
      return std::pair{it->second.region, ptr - base};
    }
    // The allocation registered at this address was freed and the address reused: kjitd's mapping
    // is of the old memory. It is unregistered (best effort) and forgotten before the new one is
    // registered, so no request names it again. (Never in checked_: it did not match above.)
    UnregisterCuda(it->second.region);
    allocations_.erase(it);
  }
  CUipcMemHandle handle;
  const CUresult r = api->cuIpcGetMemHandle(&handle, base);
  if (r != CUDA_SUCCESS) {
    return absl::FailedPreconditionError(absl::StrCat(
        driver::Check(r, "cuIpcGetMemHandle").message(),
        ": this memory cannot be shared with kjitd (expandable segments, cudaMallocAsync pools and VMM "
        "allocations have no IPC handle); with torch set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False "
        "and not backend:cudaMallocAsync, or use the in-process mode"));
  }
  Allocation a{NewName("mem"), base, size, buffer_id};
  auto ctx = link_->Context();
  ctx->AddMetadata(kDeviceUuidMetadataKey, d.uuid);
  inference::CudaSharedMemoryRegisterRequest req;
  req.set_name(a.region);
  req.set_raw_handle(handle.reserved, sizeof(handle.reserved));
  req.set_device_id(d.daemon_ordinal);
  req.set_byte_size(size);
  inference::CudaSharedMemoryRegisterResponse resp;
  KJIT_RETURN_IF_ERROR(FromGrpc(link_->infer()->CudaSharedMemoryRegister(ctx.get(), req, &resp),
                                "CudaSharedMemoryRegister"));
  Allocation& added = allocations_.insert_or_assign(base, std::move(a)).first->second;
  checked_.push_back(&added);
  return std::pair{added.region, ptr - base};
}

Status RemoteLauncher::Send(const inference::ModelInferRequest& req) {
  if (!ring_) {
    auto ctx = link_->Context();
    inference::ModelInferResponse resp;
    return FromGrpc(link_->infer()->ModelInfer(ctx.get(), req, &resp), "ModelInfer");
  }
  req.SerializeToString(&request_bytes_);
  int code = 0;
  if (Status s = ring_->Call(request_bytes_, &response_bytes_, &code, &message_,
                             std::chrono::duration_cast<std::chrono::microseconds>(link_->deadline()));
      !s.ok()) {
    if (s.code() != absl::StatusCode::kDeadlineExceeded) return s;
    // No answer: the ring is not used again (a late answer would pass for the next call's), and
    // kjitd is asked over gRPC whether it still has it. A kjitd that restarted has no poller on it
    // and knows no registration (NOT_FOUND, which Launch answers by registering everything again and
    // sending once more; without a session nothing else would notice the restart).
    ring_timed_out_ = true;
    auto ctx = link_->Context();
    inference::SystemSharedMemoryStatusRequest sreq;
    sreq.set_name(ring_region_);
    inference::SystemSharedMemoryStatusResponse sresp;
    const Status known = FromGrpc(link_->infer()->SystemSharedMemoryStatus(ctx.get(), sreq, &sresp),
                                  "SystemSharedMemoryStatus of the launch ring");
    if (known.code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(absl::StrCat(s.message(), "; kjitd no longer knows the ring (", known.message(),
                                              "): it restarted"));
    }
    if (!known.ok()) return Status(known.code(), absl::StrCat(s.message(), "; then ", known.message()));
    return absl::DeadlineExceededError(
        absl::StrCat(s.message(), " (kjitd still holds the ring: a slow launch); the next call opens a new ring"));
  }
  if (code == 0) return absl::OkStatus();
  const auto c = code > 0 && code <= 16 ? static_cast<absl::StatusCode>(code) : absl::StatusCode::kUnknown;
  return Status(c, absl::StrCat("ModelInfer on the launch ring: ", message_));
}

Status RemoteLauncher::Launch(const VerifyCall& call, int64_t device, CUstream stream) {
  // The launch layer's checks, here as in-process: KServe's outputs carry no shape, so the daemon
  // can check an output's size but not its shape; a wrong o must fail the same way in every mode.
  KJIT_ASSIGN_OR_RETURN(const kernels::KernelFamily* family, kernels::FindFamily(model_));
  KJIT_ASSIGN_OR_RETURN(kernels::TypedParams params, kernels::ConvertParams(family->params(), call.params));
  KJIT_RETURN_IF_ERROR(family->Check(call.inputs, call.outputs, params).status());
  std::lock_guard<std::mutex> lock(mu_);
  // DeviceFor and SendCall make the device's context current; the caller's is put back. (Without a
  // driver they fail on their own, after Resync.)
  std::optional<ContextRestorer> restore;
  if (auto api = driver::Get(); api.ok()) restore.emplace(*api);
  for (int attempt = 0;; ++attempt) {
    KJIT_RETURN_IF_ERROR(Resync());
    KJIT_ASSIGN_OR_RETURN(Device * d, DeviceFor(device));
    Status s = SendCall(call, d, stream);
    // Only registrations kjitd lost (it restarted) are NOT_FOUND: nothing was launched.
    if (s.code() != absl::StatusCode::kNotFound || attempt > 0) return s;
    stale_ = true;
  }
}

Status RemoteLauncher::SendCall(const VerifyCall& call, Device* d, CUstream stream) {
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  KJIT_RETURN_IF_ERROR(d->context->MakeCurrent());
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamIsCapturing(stream, &capture), "cuStreamIsCapturing"));
  if (capture != CU_STREAM_CAPTURE_STATUS_NONE) {
    return absl::FailedPreconditionError(
        "the stream is being captured into a CUDA graph: only the in-process mode can be captured");
  }
  checked_.clear();
  inference::ModelInferRequest& req = request_;  // kept: its messages' allocations are reused
  req.Clear();
  req.set_model_name(model_);
  for (const kernels::Param& p : call.params) SetParam(&req, p);
  SetParam(&req, {"kjit_device", d->daemon_ordinal});
  auto add = [&](const kernels::TensorDesc& t, CUdeviceptr data, bool input) -> Status {
    KJIT_RETURN_IF_ERROR(CheckDense(t));
    google::protobuf::Map<std::string, inference::InferParameter>* params;
    if (input) {
      auto* in = req.add_inputs();
      in->set_name(t.name);
      in->set_datatype(t.datatype);
      for (int64_t dim : t.shape) in->add_shape(dim);
      params = in->mutable_parameters();
    } else {
      auto* out = req.add_outputs();
      out->set_name(t.name);
      params = out->mutable_parameters();
    }
    if (t.byte_size == 0) {  // nothing to share (an empty tensor may have no address at all)
      if (input) req.add_raw_input_contents();
      return absl::OkStatus();
    }
    KJIT_ASSIGN_OR_RETURN(auto region, RegionFor(data, t.byte_size, *d));
    SetRegion(params, region.first, region.second, t.byte_size);
    return absl::OkStatus();
  };
  for (size_t i = 0; i < call.inputs.size(); ++i) KJIT_RETURN_IF_ERROR(add(call.inputs[i], call.input_data[i], true));
  for (size_t i = 0; i < call.outputs.size(); ++i) KJIT_RETURN_IF_ERROR(add(call.outputs[i], call.output_data[i], false));
  if (events_) {
    SetParam(&req, {"kjit_wait_event", d->ready_name});
    SetParam(&req, {"kjit_signal_event", d->done_name});
    KJIT_RETURN_IF_ERROR(d->ready->Record(stream));
    KJIT_RETURN_IF_ERROR(Send(req));
    return driver::Check(api->cuStreamWaitEvent(stream, d->done->get(), 0), "cuStreamWaitEvent(the launch)");
  }
  // Synchronous: the inputs are the stream's work so far; the reply comes after the kernels ran.
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamSynchronize(stream), "cuStreamSynchronize"));
  return Send(req);
}

}  // namespace kjit::client
