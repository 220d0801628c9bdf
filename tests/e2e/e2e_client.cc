#include "tests/e2e/e2e_client.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

namespace kjit::e2e {
namespace {

reference::CaseSpec Spec(uint64_t seed, int h, std::vector<int> p, std::vector<int> d, reference::TreeKind tree,
                         kernels::MaskKind mask, bool causal, bool lse, int padded) {
  reference::CaseSpec s;
  s.seed = seed;
  s.num_heads = h;
  s.prefix_lens = std::move(p);
  s.draft_lens = std::move(d);
  s.tree = tree;
  s.mask = mask;
  s.is_causal = causal;
  s.write_lse = lse;
  s.padded_requests = padded;
  return s;
}

}  // namespace

Status Connect(Client* x, const std::string& target, int device) {
  x->target = target;
  x->device = device;
  KJIT_ASSIGN_OR_RETURN(std::vector<driver::DeviceInfo> devices, driver::Devices());
  KJIT_E2E_CHECK(device >= 0 && device < static_cast<int>(devices.size()), "no such GPU");
  x->info = devices[device];
  KJIT_ASSIGN_OR_RETURN(driver::Context ctx, driver::Context::RetainPrimary(device));
  x->context = std::make_unique<driver::Context>(std::move(ctx));
  KJIT_RETURN_IF_ERROR(x->context->MakeCurrent());
  KJIT_ASSIGN_OR_RETURN(driver::Stream s, driver::Stream::Create());
  x->stream = std::make_unique<driver::Stream>(std::move(s));
  x->channel = e2e::Connect(target);
  KJIT_E2E_CHECK(x->channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(60)),
                 "cannot connect to " + target);
  x->infer = inference::GRPCInferenceService::NewStub(x->channel);
  x->kernels = kjit::v1::KernelService::NewStub(x->channel);
  // The socket answers while the daemon still compiles and loads: wait for ServerReady.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  for (;;) {
    grpc::ClientContext ctx;
    inference::ServerReadyResponse ready;
    if (x->infer->ServerReady(&ctx, {}, &ready).ok() && ready.ready()) break;
    KJIT_E2E_CHECK(std::chrono::steady_clock::now() < give_up, "kjitd not ready after 240 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  KJIT_ASSIGN_OR_RETURN(x->loaded, LoadKernelsFromDaemon(x->kernels.get(), x->info));
  return absl::OkStatus();
}

Status OpenSession(Client* x, const std::string& client_name) {
  x->session_ctx = std::make_unique<grpc::ClientContext>();
  x->session_stream = x->kernels->OpenSession(x->session_ctx.get());
  kjit::v1::SessionEvent hello;
  KJIT_E2E_CHECK(x->session_stream->Read(&hello), "OpenSession gave no id");
  x->session = hello.session_id();
  kjit::v1::SessionRequest me;
  me.set_client_name(client_name);
  x->session_stream->Write(me);
  return absl::OkStatus();
}

StatusOr<grpc::Status> TryRegisterCuda(Client* x, const std::string& name, const CudaArena& arena) {
  KJIT_ASSIGN_OR_RETURN(std::string handle, arena.IpcHandle());
  grpc::ClientContext ctx;
  if (!x->session.empty()) ctx.AddMetadata("kjit-session", x->session);
  ctx.AddMetadata("kjit-device-uuid", x->info.uuid);  // lets the daemon catch a device_id mix-up
  inference::CudaSharedMemoryRegisterRequest req;
  req.set_name(name);
  req.set_raw_handle(handle);
  req.set_device_id(x->device);
  req.set_byte_size(arena.size());
  inference::CudaSharedMemoryRegisterResponse resp;
  return x->infer->CudaSharedMemoryRegister(&ctx, req, &resp);
}

static Status RegisterCuda(Client* x, const std::string& name, const CudaArena& arena) {
  KJIT_ASSIGN_OR_RETURN(const grpc::Status s, TryRegisterCuda(x, name, arena));
  KJIT_E2E_CHECK(s.ok(), absl::StrCat("CudaSharedMemoryRegister ", name, ": ", s.error_message()));
  return absl::OkStatus();
}

StatusOr<Arenas> MakeArenas(Client* x, size_t in_bytes, size_t out_bytes) {
  Arenas a;
  KJIT_ASSIGN_OR_RETURN(a.in, CudaArena::Create(in_bytes));
  KJIT_ASSIGN_OR_RETURN(a.out, CudaArena::Create(out_bytes));
  KJIT_RETURN_IF_ERROR(RegisterCuda(x, x->prefix + "-in", *a.in));
  KJIT_RETURN_IF_ERROR(RegisterCuda(x, x->prefix + "-out", *a.out));
  return a;
}

Status RegisterEvent(Client* x, const std::string& name, CUevent event) {
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  CUipcEventHandle h;
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuIpcGetEventHandle(&h, event), "cuIpcGetEventHandle"));
  grpc::ClientContext ctx;
  if (!x->session.empty()) ctx.AddMetadata("kjit-session", x->session);
  ctx.AddMetadata("kjit-device-uuid", x->info.uuid);
  kjit::v1::RegisterEventRequest req;
  req.set_name(name);
  req.set_raw_handle(std::string(reinterpret_cast<const char*>(&h), sizeof(h)));
  req.set_device_id(x->device);
  kjit::v1::RegisterEventResponse resp;
  const grpc::Status s = x->kernels->RegisterEvent(&ctx, req, &resp);
  KJIT_E2E_CHECK(s.ok(), absl::StrCat("RegisterEvent ", name, ": ", s.error_message()));
  return absl::OkStatus();
}

StatusOr<ReadyDone> MakeReadyDone(Client* x) {
  constexpr unsigned kFlags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
  KJIT_ASSIGN_OR_RETURN(driver::Event ready, driver::Event::Create(kFlags));
  KJIT_ASSIGN_OR_RETURN(driver::Event done, driver::Event::Create(kFlags));
  KJIT_RETURN_IF_ERROR(RegisterEvent(x, x->prefix + "-ready", ready.get()));
  KJIT_RETURN_IF_ERROR(RegisterEvent(x, x->prefix + "-done", done.get()));
  return ReadyDone{std::move(ready), std::move(done)};
}

grpc::Status Call(Client* x, const inference::ModelInferRequest& req, inference::ModelInferResponse* resp) {
  grpc::ClientContext ctx;
  if (!x->session.empty()) ctx.AddMetadata("kjit-session", x->session);  // its regions are the session's
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return x->infer->ModelInfer(&ctx, req, resp);
}

StatusOr<std::unique_ptr<LaunchRing>> LaunchRing::Open(Client* x, size_t bytes) {
  const std::string name = x->prefix + "-ring";
  const std::string key = absl::StrCat("/kjit-", name, "-", getpid());
  const int fd = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return absl::InternalError("shm_open " + key);
  void* map = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(bytes)) == 0) map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  std::unique_ptr<LaunchRing> ring(new LaunchRing(key, map, bytes));
  if (map == MAP_FAILED) return absl::InternalError("mapping " + key);
  KJIT_ASSIGN_OR_RETURN(ipc::RingClient client, ipc::RingClient::Create(map, bytes));
  ring->client_ = std::make_unique<ipc::RingClient>(client);
  grpc::ClientContext ctx;
  if (!x->session.empty()) ctx.AddMetadata("kjit-session", x->session);
  inference::SystemSharedMemoryRegisterRequest reg;
  reg.set_name(name);
  reg.set_key(key);
  reg.set_byte_size(bytes);
  inference::SystemSharedMemoryRegisterResponse registered;
  const grpc::Status s = x->infer->SystemSharedMemoryRegister(&ctx, reg, &registered);
  if (!s.ok()) return absl::InternalError("registering " + name + ": " + s.error_message());
  grpc::ClientContext octx;
  if (!x->session.empty()) octx.AddMetadata("kjit-session", x->session);
  kjit::v1::OpenRingRequest open;
  open.set_region(name);
  kjit::v1::OpenRingResponse opened;
  const grpc::Status o = x->kernels->OpenRing(&octx, open, &opened);
  if (!o.ok()) return absl::InternalError("OpenRing " + name + ": " + o.error_message());
  return ring;
}

LaunchRing::~LaunchRing() {
  if (map_ != MAP_FAILED) munmap(map_, bytes_);
  shm_unlink(key_.c_str());
}

grpc::Status LaunchRing::Infer(const std::string& request_bytes, inference::ModelInferResponse* resp) {
  std::string response, message;
  int code = 0;
  const Status s = client_->Call(request_bytes, &response, &code, &message, std::chrono::seconds(60));
  if (!s.ok()) {
    return grpc::Status(s.code() == absl::StatusCode::kDeadlineExceeded ? grpc::StatusCode::DEADLINE_EXCEEDED
                                                                        : grpc::StatusCode::INTERNAL,
                        std::string(s.message()));
  }
  if (code != 0) return grpc::Status(static_cast<grpc::StatusCode>(code), message);
  if (!resp->ParseFromString(response)) return grpc::Status(grpc::StatusCode::INTERNAL, "ring response does not parse");
  return grpc::Status::OK;
}

StatusOr<std::vector<char>> ReadDevice(CUdeviceptr p, size_t bytes) {
  std::vector<char> v(bytes);
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemcpyDtoH(v.data(), p, bytes), "read device"));
  return v;
}

std::vector<reference::CaseSpec> Cases() {
  using kernels::MaskKind;
  using reference::TreeKind;
  return {Spec(1, 8, {1000, 37}, {16, 7}, TreeKind::kBushy, MaskKind::kBool, true, true, 1),
          Spec(2, 16, {4097}, {33}, TreeKind::kRandom, MaskKind::kPacked, false, false, 0),
          Spec(3, 64, {0, 1}, {1, 64}, TreeKind::kChain, MaskKind::kBool, true, true, 0)};
}

Status CheckCase(Client* x, Arenas& a, const reference::MlaCase& c, const CaseLayout& l, const std::string& model,
                 bool inline_small, LaunchRing* ring) {
  const std::string what = absl::StrCat(model, " seed ", c.spec.seed, inline_small ? " inline" : " regions",
                                        ring != nullptr ? " (launch ring)" : "");
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemsetD8(a.out->base(), 0xFF, a.out->size()), "poison"));
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuCtxSynchronize(), "poison sync"));
  inference::ModelInferResponse resp;
  const auto req = InferRequest(model, c, l, x->prefix + "-in", x->prefix + "-out", x->device, inline_small);
  const grpc::Status s = ring != nullptr ? ring->Infer(req, &resp) : Call(x, req, &resp);
  KJIT_E2E_CHECK(s.ok(), absl::StrCat(what, ": ModelInfer ", s.error_message()));
  const int outputs = c.problem.write_lse ? 2 : 1;
  KJIT_E2E_CHECK(resp.outputs_size() == outputs && resp.raw_output_contents_size() == outputs,
                 absl::StrCat(what, ": ", resp.outputs_size(), " outputs, ", resp.raw_output_contents_size(), " raw"));
  KJIT_E2E_CHECK(resp.outputs(0).name() == "o" && resp.outputs(0).shape_size() == 3 &&
                     resp.outputs(0).shape(0) == c.problem.num_q && resp.outputs(0).shape(2) == 512,
                 what + ": output o metadata");
  std::vector<char> o, lse;
  if (inline_small) {
    o.assign(resp.raw_output_contents(0).begin(), resp.raw_output_contents(0).end());
    if (outputs == 2) lse.assign(resp.raw_output_contents(1).begin(), resp.raw_output_contents(1).end());
  } else {
    for (const auto& raw : resp.raw_output_contents()) KJIT_E2E_CHECK(raw.empty(), what + ": raw bytes for a region output");
    KJIT_ASSIGN_OR_RETURN(o, ReadDevice(a.out->base() + l.o_offset, l.o_bytes));
    if (outputs == 2) {
      KJIT_ASSIGN_OR_RETURN(lse, ReadDevice(a.out->base() + l.lse_offset, l.lse_bytes));
    }
  }
  KJIT_E2E_CHECK(o.size() == l.o_bytes, what + ": o size");
  KJIT_ASSIGN_OR_RETURN(InProcessResult mine,
                        RunInProcess(model, *x->loaded, x->info, l, a.in->base(), x->stream->get()));
  KJIT_E2E_CHECK(std::memcmp(o.data(), mine.o.data(), l.o_bytes) == 0, what + ": o differs from the in-process launch");
  if (outputs == 2) {
    KJIT_E2E_CHECK(lse.size() == l.lse_bytes && std::memcmp(lse.data(), mine.lse.data(), l.lse_bytes) == 0,
                   what + ": lse differs from the in-process launch");
  }
  std::vector<uint16_t> o_bits(l.o_bytes / 2);
  std::memcpy(o_bits.data(), o.data(), l.o_bytes);
  const reference::Comparison cmp = reference::Compare(c, reference::Reference(c), o_bits, mine.lse);
  KJIT_E2E_CHECK(cmp.ok(), what + ": against the float64 reference: " + cmp.Describe());
  std::printf("PASS %s (rel frob %.2e)\n", what.c_str(), cmp.rel_frobenius);
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace kjit::e2e
