#include "client/cpp/src/daemon_link.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <climits>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "runtime/common/client_text.h"
#include "runtime/common/daemon_target.h"
#include "runtime/common/log.h"
#include "runtime/kernels/registry.h"

namespace kjit::client {
namespace {

constexpr char kSessionMetadataKey[] = "kjit-session";

std::chrono::system_clock::time_point Until(std::chrono::milliseconds d) { return std::chrono::system_clock::now() + d; }

}  // namespace

std::string DefaultTarget() { return DefaultDaemonTarget(); }

Status FromGrpc(const grpc::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  const absl::string_view w(what.data(), what.size());
  // This library never cancels a call itself (its calls end by their deadlines), so CANCELLED is
  // gRPC's answer to a call that was in flight while kjitd shut down: the daemon is unavailable.
  if (s.error_code() == grpc::StatusCode::CANCELLED) {
    return absl::UnavailableError(absl::StrCat(w, ": kjitd stopped while the call was in flight (", s.error_message(),
                                               "); retry once it is back"));
  }
  const int code = static_cast<int>(s.error_code());
  const auto c = code >= 0 && code <= 16 ? static_cast<absl::StatusCode>(code) : absl::StatusCode::kUnknown;
  return Status(c, absl::StrCat(w, ": ", s.error_message()));
}

StatusOr<std::unique_ptr<DaemonLink>> DaemonLink::Connect(const std::string& target,
                                                          std::chrono::milliseconds deadline,
                                                          const std::string& client_name, bool session,
                                                          const std::string& token) {
  std::unique_ptr<DaemonLink> l(new DaemonLink());
  l->target_ = target;
  l->deadline_ = deadline;
  if (const char* env = std::getenv("KJIT_COMPILE_DEADLINE_MS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long long ms = std::strtoll(env, &end, 10);
    if (*end != '\0' || ms <= 0) {
      // Not a reason to refuse every mode that talks to kjitd (ring and remote never use it).
      Log(LogLevel::kWarn, absl::StrCat("$KJIT_COMPILE_DEADLINE_MS is '", ClientText(env),
                                        "', not a positive number of milliseconds: using ", l->compile_deadline_.count()));
    } else {
      l->compile_deadline_ = std::chrono::milliseconds(std::min<long long>(ms, kMaxDeadlineMs));
    }
  }
  l->compile_deadline_ = std::max(l->compile_deadline_, deadline);
  l->client_name_ = client_name;
  l->token_ = token;
  l->want_session_ = session;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(INT_MAX);
  args.SetMaxSendMessageSize(INT_MAX);
  // A daemon restarted under the same socket is found again quickly.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  l->channel_ = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  l->infer_ = inference::GRPCInferenceService::NewStub(l->channel_);
  l->kernels_ = kjit::v1::KernelService::NewStub(l->channel_);
  auto ctx = l->Context();
  inference::ServerLiveRequest req;
  inference::ServerLiveResponse resp;
  KJIT_RETURN_IF_ERROR(FromGrpc(l->infer_->ServerLive(ctx.get(), req, &resp), absl::StrCat("kjitd at ", target)));
  if (session) KJIT_RETURN_IF_ERROR(l->OpenSession(false));
  return l;
}

Status DaemonLink::OpenSession(bool wait_for_connection) {
  // After a restart the channel may sit in its reconnect backoff: wait (within the deadline) for it
  // to connect rather than fail at once. (Not through the stream: it has no deadline.)
  if (wait_for_connection && !channel_->WaitForConnected(Until(deadline_))) {
    return absl::UnavailableError(absl::StrCat("kjitd at ", target_, " did not answer within ", deadline_.count(),
                                               " ms"));
  }
  session_ctx_ = std::make_unique<grpc::ClientContext>();
  if (!token_.empty()) session_ctx_->AddMetadata(kTokenMetadataKey, token_);
  session_stream_ = kernels_->OpenSession(session_ctx_.get());
  kjit::v1::SessionRequest hello;
  hello.set_client_name(client_name_);
  kjit::v1::SessionEvent first;
  // The daemon answers at once with the session id; the read has no deadline of its own, so a
  // watchdog cancels the stream when it does not come in time.
  std::atomic<bool> answered{false};
  std::thread watchdog([this, &answered] {
    const auto until = std::chrono::steady_clock::now() + deadline_;
    while (!answered.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!answered.load()) session_ctx_->TryCancel();
  });
  const bool ok = session_stream_->Write(hello) && session_stream_->Read(&first);
  answered = true;
  watchdog.join();
  if (!ok || first.session_id().empty()) {
    session_ctx_->TryCancel();
    const grpc::Status why = session_stream_->Finish();
    session_stream_.reset();
    if (why.error_code() == grpc::StatusCode::UNAUTHENTICATED) return FromGrpc(why, absl::StrCat("kjitd at ", target_));
    return absl::UnavailableError(absl::StrCat("kjitd at ", target_, ": OpenSession did not answer within ",
                                               deadline_.count(), " ms", why.ok() ? "" : ": ", why.error_message()));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    session_ = first.session_id();
  }
  // The generation first: a launcher that sees the session live must also see that what it
  // registered under an older one is gone.
  ++generation_;
  session_ended_ = false;
  // Keeps the stream open for the client's lifetime: the daemon ends the session when it closes,
  // and the stream ends when the daemon goes away.
  session_thread_ = std::thread([this] {
    kjit::v1::SessionEvent e;
    while (session_stream_->Read(&e)) {
    }
    session_ended_ = true;
  });
  return absl::OkStatus();
}

void DaemonLink::CloseSession() {
  if (!session_stream_) return;
  session_ctx_->TryCancel();
  if (session_thread_.joinable()) session_thread_.join();
  (void)session_stream_->Finish();
  session_stream_.reset();
}

Status DaemonLink::EnsureSession() {
  if (!want_session_ || !session_ended_.load()) return absl::OkStatus();
  std::lock_guard<std::mutex> one_at_a_time(ensure_mu_);
  if (!session_ended_.load() && session_stream_) return absl::OkStatus();  // another thread reopened it
  CloseSession();
  {
    std::lock_guard<std::mutex> lock(mu_);
    session_.clear();
  }
  if (Status s = OpenSession(true); !s.ok()) {
    session_ended_ = true;  // the next call tries again
    return Status(s.code(), absl::StrCat("kjitd's session ended (the daemon stopped or restarted) and a new one "
                                         "could not be opened: ", s.message()));
  }
  return absl::OkStatus();
}

DaemonLink::~DaemonLink() { CloseSession(); }

std::string DaemonLink::session() const {
  std::lock_guard<std::mutex> lock(mu_);
  return session_;
}

std::unique_ptr<grpc::ClientContext> DaemonLink::Context() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(Until(deadline_));
  if (!token_.empty()) ctx->AddMetadata(kTokenMetadataKey, token_);
  std::lock_guard<std::mutex> lock(mu_);
  if (!session_.empty()) ctx->AddMetadata(kSessionMetadataKey, session_);
  return ctx;
}

StatusOr<std::vector<kernels::CompiledKernel>> DaemonLink::GetKernels(std::string_view family, const std::string& arch) {
  std::vector<kernels::CompiledKernel> all;
  const auto start = std::chrono::steady_clock::now();  // the compile deadline covers every specialization
  for (const kernels::Specialization& spec : kernels::FamilySpecializations(family)) {
    auto ctx = Context();
    kjit::v1::GetKernelRequest req;
    req.set_family(spec.family);
    req.set_specialization(spec.name);
    req.set_arch(arch);
    kjit::v1::GetKernelResponse resp;
    const std::string what = absl::StrCat("GetKernel ", spec.family, "/", spec.name, " for ", arch);
    // kjitd compiles a kernel it has not cached inside the call, and on a busy machine that takes
    // longer than a launch's deadline. The compile goes on after the call's deadline (the cache lets
    // one compiler per key run and the others wait for it), so while kjitd still answers ServerLive
    // within the deadline the call is made again, up to the compile deadline; a daemon that does not
    // answer is an error within two deadlines (the call's, then ServerLive's).
    auto sent = std::chrono::steady_clock::now();
    grpc::Status got = kernels_->GetKernel(ctx.get(), req, &resp);
    std::string stuck;  // why the wait ended early
    while (got.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
           std::chrono::steady_clock::now() - start < compile_deadline_) {
      // An answer of DEADLINE_EXCEEDED well before the deadline is not a compile running out the
      // call's time (a proxy's, say): the calls are spaced rather than repeated back to back.
      if (std::chrono::steady_clock::now() - sent < deadline_ / 2) {
        std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(deadline_ / 2, std::chrono::milliseconds(200)));
      }
      auto live_ctx = Context();
      inference::ServerLiveRequest live_req;
      inference::ServerLiveResponse live;
      const grpc::Status alive = infer_->ServerLive(live_ctx.get(), live_req, &live);
      if (!alive.ok() || !live.live()) {
        stuck = absl::StrCat("kjitd did not answer ServerLive within ", deadline_.count(), " ms (",
                             alive.ok() ? "not live" : alive.error_message(), ")");
        break;
      }
      ctx = Context();
      resp.Clear();
      sent = std::chrono::steady_clock::now();
      got = kernels_->GetKernel(ctx.get(), req, &resp);
    }
    if (got.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
      return absl::DeadlineExceededError(absl::StrCat(
          what, ": no kernel after ", waited.count(), " ms; ",
          !stuck.empty() ? stuck
                         : absl::StrCat("kjitd was still compiling it at the compile deadline of ",
                                        compile_deadline_.count(),
                                        " ms (raise $KJIT_COMPILE_DEADLINE_MS, or fill kjitd's cache beforehand with "
                                        "`kjit compile`, or name the arch in kjitd --arch)")));
    }
    KJIT_RETURN_IF_ERROR(FromGrpc(got, what));
    kernels::CompiledKernel k;
    k.spec = spec;
    k.arch = arch;
    k.cubin_arch = resp.arch();  // sm_90a for mla_verify on sm_90
    k.cache_key = resp.cache_key();
    k.cubin.assign(resp.cubin().begin(), resp.cubin().end());
    for (const auto& kr : resp.kernels()) k.lowered_names.emplace_back(kr.name_expression(), kr.lowered_name());
    k.origin = kernels::CompiledKernel::Origin::kDiskHit;
    all.push_back(std::move(k));
  }
  return all;
}

StatusOr<kjit::v1::ListDevicesResponse> DaemonLink::ListDevices() {
  auto ctx = Context();
  kjit::v1::ListDevicesRequest req;
  kjit::v1::ListDevicesResponse resp;
  KJIT_RETURN_IF_ERROR(FromGrpc(kernels_->ListDevices(ctx.get(), req, &resp), "ListDevices"));
  return resp;
}

}  // namespace kjit::client
