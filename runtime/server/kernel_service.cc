#include "runtime/server/kernel_service.h"

#include <algorithm>
#include <atomic>
#include <set>

#include "runtime/kernels/registry.h"
#include "runtime/nvrtc/compiler.h"
#include "runtime/common/client_text.h"
#include "runtime/ipc/registration.h"
#include "runtime/server/grpc_status.h"
#include "runtime/server/token.h"
#include "runtime/common/log.h"

namespace kjit::server {
namespace {

void FillKernels(const kernels::CompiledKernel& k, google::protobuf::RepeatedPtrField<v1::KernelResources>* out) {
  for (const auto& [expr, lowered] : k.lowered_names) {
    auto* r = out->Add();
    r->set_name_expression(expr);
    r->set_lowered_name(lowered);
    for (const auto& res : k.resources) {
      if (res.lowered_name != lowered) continue;
      r->mutable_resources()->set_registers(res.registers);
      r->mutable_resources()->set_spill_stores_bytes(res.spill_store_bytes);
      r->mutable_resources()->set_spill_loads_bytes(res.spill_load_bytes);
      r->mutable_resources()->set_shared_bytes(res.shared_bytes);
      r->mutable_resources()->set_local_bytes(res.stack_bytes);
    }
  }
}

StatusOr<std::vector<kernels::Specialization>> SelectSpecs(const std::string& family,
                                                           const std::vector<std::string>& names) {
  std::vector<kernels::Specialization> specs;
  if (family.empty()) {
    if (!names.empty()) return absl::InvalidArgumentError("specializations given without a family");
    return kernels::Catalog();
  }
  specs = kernels::FamilySpecializations(family);
  if (specs.empty()) return absl::InvalidArgumentError(absl::StrCat("unknown kernel family '", ClientText(family), "'"));
  if (names.empty()) return specs;
  // Each specialization once, in the order first named: a name repeated 100,000 times in a 1 MiB
  // request made as many results (a cubin each, about 130 KB) that the call held to its end.
  std::vector<kernels::Specialization> out;
  std::vector<bool> named(specs.size(), false);
  for (const auto& n : names) {
    auto it = std::find_if(specs.begin(), specs.end(), [&](const auto& s) { return s.name == n; });
    if (it == specs.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("family '", family, "' has no specialization '", ClientText(n), "'"));
    }
    const size_t i = static_cast<size_t>(it - specs.begin());
    if (!named[i]) out.push_back(*it);
    named[i] = true;
  }
  return out;
}

}  // namespace

KernelService::KernelService(Daemon* d) : d_(d) {
  const std::string* token = d != nullptr ? &d->tcp_token : nullptr;  // null: a test's service without a daemon
  using S = KernelService;
  auto add = [&](const char* path, auto handler) { AddMethod(BoundedUnary(path, handler, this, token)); };
  add("/kjit.v1.KernelService/ListKernels", &S::ListKernels);
  add("/kjit.v1.KernelService/ListDevices", &S::ListDevices);
  add("/kjit.v1.KernelService/GetKernel", &S::GetKernel);
  add("/kjit.v1.KernelService/CacheStats", &S::CacheStats);
  add("/kjit.v1.KernelService/CacheList", &S::CacheList);
  add("/kjit.v1.KernelService/RegisterEvent", &S::RegisterEvent);
  add("/kjit.v1.KernelService/UnregisterEvent", &S::UnregisterEvent);
  add("/kjit.v1.KernelService/OpenRing", &S::OpenRing);
  add("/kjit.v1.KernelService/CloseRing", &S::CloseRing);
  add("/kjit.v1.KernelService/DaemonStatus", &S::DaemonStatus);
  AddMethod(BoundedServerStream("/kjit.v1.KernelService/Compile", &S::Compile, this, token));
  // Its token is checked by ServeSession, and each message as it comes.
  AddMethod(new grpc::internal::RpcServiceMethod(
      "/kjit.v1.KernelService/OpenSession", grpc::internal::RpcMethod::BIDI_STREAMING,
      new grpc::internal::BidiStreamingHandler<S, grpc::ByteBuffer, v1::SessionEvent>(
          [](S* s, grpc::ServerContext* ctx, grpc::ServerReaderWriter<v1::SessionEvent, grpc::ByteBuffer>* stream) {
            return s->ServeSession(ctx, stream);
          },
          this)));
}

grpc::Status KernelService::ListKernels(grpc::ServerContext* ctx, const v1::ListKernelsRequest* req,
                                        v1::ListKernelsResponse* resp) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  auto specs = SelectSpecs(req->family(), {});
  if (!specs.ok()) return ToGrpc(specs.status());
  if (!d_->ready.load()) return ToGrpc(absl::UnavailableError("starting: kernels not loaded yet"));
  std::lock_guard<std::mutex> lock(d_->compiled_mu);
  for (const auto& s : *specs) {
    auto* k = resp->add_kernels();
    k->set_family(s.family);
    k->set_specialization(s.name);
    for (const auto& e : s.name_expressions) k->add_name_expressions(e);
    const std::string prefix = absl::StrCat(s.family, "/", s.name, "/");
    for (const auto& [key, c] : d_->compiled) {
      if (key.rfind(prefix, 0) == 0) k->add_archs_compiled(c.arch);
    }
    for (const auto& dev : d_->devices) {
      if (dev->kernels() != nullptr) k->add_devices_loaded(dev->info().ordinal);
    }
  }
  return grpc::Status::OK;
}

grpc::Status KernelService::ListDevices(grpc::ServerContext* ctx, const v1::ListDevicesRequest*,
                                        v1::ListDevicesResponse* resp) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  if (!d_->ready.load()) return ToGrpc(absl::UnavailableError("starting: kernels not loaded yet"));
  for (const auto& dev : d_->devices) {
    auto* out = resp->add_devices();
    out->set_ordinal(dev->info().ordinal);
    out->set_uuid(dev->info().uuid);
    out->set_name(dev->info().name);
    out->set_arch(dev->info().arch);
    out->set_sm_count(dev->info().sm_count);
    out->set_kernels_loaded(dev->kernels() != nullptr);
  }
  resp->set_compile_only_reason(d_->compile_only_reason);
  return grpc::Status::OK;
}

grpc::Status KernelService::Compile(grpc::ServerContext* ctx, const v1::CompileRequest* req,
                                    grpc::ServerWriter<v1::CompileProgress>* writer) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  auto specs = SelectSpecs(req->family(), {req->specializations().begin(), req->specializations().end()});
  if (!specs.ok()) return ToGrpc(specs.status());
  if (!d_->ready.load()) return ToGrpc(absl::UnavailableError("starting: kernels not loaded yet"));
  std::vector<std::string> archs(req->archs().begin(), req->archs().end());
  if (archs.empty()) {
    for (const auto& dev : d_->devices) archs.push_back(dev->info().arch);
    for (const auto& a : d_->flags.archs) archs.push_back(a);
  }
  std::sort(archs.begin(), archs.end());
  archs.erase(std::unique(archs.begin(), archs.end()), archs.end());
  if (archs.empty()) return ToGrpc(absl::InvalidArgumentError("no archs given and no GPU to take them from"));
  for (const auto& a : archs) {
    if (Status s = nvrtc::ValidateArch(a); !s.ok()) return ToGrpc(s);
  }
  // A client that cancels or leaves (a write fails), or the server's shutdown cancelling the call, stops
  // the compiles not yet started: they took both cores for minutes after the client had gone, and
  // held kjitd's shutdown for as long.
  std::atomic<bool> gone{false};
  auto stop = [&] { return gone.load() || ctx->IsCancelled(); };
  d_->compiler->GetAll(*specs, archs, [&](int done, int total, const kernels::CompiledKernel* k,
                                          const Status& s) {
    v1::CompileProgress msg;
    msg.set_done(done);
    msg.set_total(total);
    if (k != nullptr) {
      d_->AddCompiled(*k);
      msg.set_family(k->spec.family);
      msg.set_specialization(k->spec.name);
      msg.set_arch(k->arch);
      msg.set_cache_key(k->cache_key);
      msg.set_cache_hit(k->origin != kernels::CompiledKernel::Origin::kCompiled);
      msg.set_compile_seconds(k->compile_ms / 1e3);
      FillKernels(*k, msg.mutable_kernels());
      if (msg.kernels_size() > 0) *msg.mutable_resources() = msg.kernels(0).resources();
    }
    if (!s.ok()) msg.set_error(std::string(s.message()));
    if (!writer->Write(msg)) gone = true;
  }, /*keep_results=*/false, stop);  // each result goes out as it comes: none is held to the call's end
  if (stop()) {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "the call was cancelled or its client left: the compiles not yet started were dropped");
  }
  return grpc::Status::OK;
}

grpc::Status KernelService::GetKernel(grpc::ServerContext* ctx, const v1::GetKernelRequest* req,
                                      v1::GetKernelResponse* resp) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  auto specs = SelectSpecs(req->family(), {req->specialization()});
  if (!specs.ok()) return ToGrpc(specs.status());
  if (Status s = nvrtc::ValidateArch(req->arch()); !s.ok()) return ToGrpc(s);
  auto k = d_->FindCompiled(req->family(), req->specialization(), req->arch());
  if (!k.ok()) {
    k = d_->compiler->Get(specs->front(), req->arch(), [ctx] { return ctx->IsCancelled(); });
    if (!k.ok()) return ToGrpc(k.status());
    d_->AddCompiled(*k);
  }
  resp->set_cubin(k->cubin.data(), k->cubin.size());
  resp->set_cache_key(k->cache_key);
  resp->set_arch(k->cubin_arch);
  FillKernels(*k, resp->mutable_kernels());
  return grpc::Status::OK;
}

grpc::Status KernelService::CacheStats(grpc::ServerContext* ctx, const v1::CacheStatsRequest*,
                                       v1::CacheStatsResponse* resp) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  const cache::Stats s = d_->cache->stats();
  resp->set_directory(d_->cache->dir());
  resp->set_max_bytes(d_->cache->max_bytes());
  resp->set_hits(s.hits_memory + s.hits_disk);
  resp->set_misses(s.misses);
  resp->set_compiles(s.compiles);
  resp->set_evictions(s.evictions);
  resp->set_corrupt(s.corrupt);
  resp->set_write_failures(s.write_failures);
  resp->set_memory_only(d_->cache->memory_only());
  resp->set_read_only(d_->cache->read_only());
  resp->set_warning(d_->cache->warning());
  if (auto usage = d_->cache->DiskUsage(); usage.ok()) {  // from the directory: no entry is read
    resp->set_entries(usage->entries);
    resp->set_bytes(usage->bytes);
  }
  return grpc::Status::OK;
}

grpc::Status KernelService::CacheList(grpc::ServerContext* ctx, const v1::CacheListRequest*,
                                      v1::CacheListResponse* resp) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  auto list = d_->cache->List();
  if (!list.ok()) return ToGrpc(list.status());
  for (const auto& e : *list) {
    auto* out = resp->add_entries();
    out->set_key(e.key);
    out->set_family(e.meta.family);
    out->set_specialization(e.meta.specialization);
    out->set_arch(e.meta.arch);
    out->set_bytes(e.file_bytes);
    out->set_last_used_unix(e.meta.last_used_unix);
  }
  return grpc::Status::OK;
}

grpc::Status KernelService::RegisterEvent(grpc::ServerContext* ctx, const v1::RegisterEventRequest* req,
                                          v1::RegisterEventResponse*) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  auto who = d_->sessions.RegistrantOf(*ctx);
  if (!who.ok()) return ToGrpc(who.status());
  return ToGrpc(ipc::RegisterEvent(&d_->regions, req->name(), req->raw_handle(), req->device_id(),
                                   DeviceResolverOf(d_, *ctx, "event", req->name()), *who));
}

grpc::Status KernelService::UnregisterEvent(grpc::ServerContext* ctx, const v1::UnregisterEventRequest* req,
                                            v1::UnregisterEventResponse*) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  auto session = d_->sessions.ScopeOf(*ctx);
  if (!session.ok()) return ToGrpc(session.status());
  d_->regions.RemoveEvent(req->name(), *session);
  return grpc::Status::OK;
}

grpc::Status KernelService::OpenRing(grpc::ServerContext* ctx, const v1::OpenRingRequest* req,
                                     v1::OpenRingResponse* resp) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  auto session = d_->sessions.ScopeOf(*ctx);
  if (!session.ok()) return ToGrpc(session.status());
  auto capacity = d_->rings.Open(req->region(), *session);
  if (!capacity.ok()) return ToGrpc(capacity.status());
  resp->set_capacity(*capacity);
  return grpc::Status::OK;
}

grpc::Status KernelService::CloseRing(grpc::ServerContext* ctx, const v1::CloseRingRequest* req,
                                      v1::CloseRingResponse*) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  auto session = d_->sessions.ScopeOf(*ctx);
  if (!session.ok()) return ToGrpc(session.status());
  d_->rings.Close(req->region(), *session);
  return grpc::Status::OK;
}

grpc::Status KernelService::ServeSession(grpc::ServerContext* ctx,
                                         grpc::ServerReaderWriter<v1::SessionEvent, grpc::ByteBuffer>* stream) {
  KJIT_CHECK_TOKEN(*ctx, d_->tcp_token);
  auto opened = d_->sessions.Open(ctx->peer(), ctx);
  if (!opened.ok()) return ToGrpc(opened.status());
  const std::string id = *std::move(opened);
  v1::SessionEvent hello;
  hello.set_session_id(id);
  stream->Write(hello);
  std::string client = ctx->peer();
  grpc::Status ended = grpc::Status::OK;
  for (;;) {
    grpc::ByteBuffer bytes;
    if (!stream->Read(&bytes)) break;  // the client ended the stream or went away
    v1::SessionRequest msg;  // one per read: a large one's bytes are not kept for the session's life
    if (grpc::Status parsed = ParseControlRequest(*ctx, nullptr, bytes, &msg); !parsed.ok()) {
      ended = parsed;
      break;
    }
    if (msg.client_name().size() > ipc::kMaxRegistrationNameBytes) {
      ended = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                           absl::StrCat("client_name has ", msg.client_name().size(), " bytes; at most ",
                                        ipc::kMaxRegistrationNameBytes, ": the session ends (open one with a shorter name)"));
      break;
    }
    if (!msg.client_name().empty()) client = msg.client_name();
  }
  // Close first so that no new registration can name the session, then release.
  d_->sessions.Close(id);
  const size_t released = d_->regions.ReleaseSession(id);
  // The session's last asynchronous launches hold its regions and events until they are reaped:
  // those that have run are dropped now (the idle reaper takes the rest once they have).
  if (d_->ready) {  // the devices are fixed once ready
    for (auto& dev : d_->devices) dev->ReapFinished();
  }
  Log(LogLevel::kInfo, absl::StrCat("session ", id, " (", ClientText(client), ") ended; released ", released,
                                    " regions/events", ended.ok() ? "" : " (a message refused)"));
  return ended;
}

}  // namespace kjit::server
