#include "cli/daemon_client.h"

#include <cstdlib>

#include "runtime/common/daemon_target.h"

namespace kjit::cli {

namespace {

std::string TargetOrDefault(const std::string& target) {
  if (!target.empty()) return target;
  if (const char* t = std::getenv("KJIT_TARGET"); t != nullptr && *t != '\0') return t;
  return DefaultDaemonTarget();
}

}  // namespace

DaemonClient::DaemonClient(const std::string& target, std::chrono::milliseconds deadline)
    : target_(TargetOrDefault(target)), deadline_(deadline) {
  // kjitd --token-file: TCP calls carry the token. The Unix socket needs none, and a stray
  // $KJIT_TOKEN_FILE must not fail a probe there.
  const bool tcp = target_.rfind("unix:", 0) != 0;
  if (const char* f = std::getenv("KJIT_TOKEN_FILE"); tcp && f != nullptr && *f != '\0') {
    auto token = ReadClientTokenFile(f);
    if (token.ok()) token_ = *std::move(token);
    else token_status_ = token.status();
  }
  channel_ = grpc::CreateChannel(target_, grpc::InsecureChannelCredentials());
  health_ = grpc::health::v1::Health::NewStub(channel_);
  inference_ = inference::GRPCInferenceService::NewStub(channel_);
  kernels_ = kjit::v1::KernelService::NewStub(channel_);
}

std::unique_ptr<grpc::ClientContext> DaemonClient::Context() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + deadline_);
  if (!token_.empty()) ctx->AddMetadata(kTokenMetadataKey, token_);
  return ctx;
}

Status DaemonClient::Check(const grpc::Status& s, const char* what, bool first_contact) const {
  if (!token_status_.ok()) return token_status_;
  if (s.ok()) return absl::OkStatus();
  const int code = static_cast<int>(s.error_code());
  const auto c = code >= 0 && code <= 16 ? static_cast<absl::StatusCode>(code) : absl::StatusCode::kUnknown;
  if (first_contact && (c == absl::StatusCode::kUnavailable || c == absl::StatusCode::kDeadlineExceeded)) {
    return Status(c, absl::StrCat("cannot reach kjitd at ", target_, " (", what, ": ", s.error_message(),
                                  "); is it running? choose the daemon with --target or $KJIT_TARGET"));
  }
  return Status(c, absl::StrCat(what, " at ", target_, ": ", s.error_message()));
}

}  // namespace kjit::cli
