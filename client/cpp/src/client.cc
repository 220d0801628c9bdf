#include "client/cpp/src/client.h"

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "runtime/common/daemon_target.h"
#include "runtime/common/log.h"
#include "runtime/kernels/registry.h"

namespace kjit::client {
namespace {

constexpr char kDefaultModes[] = "in-process,ring,remote,embedded";
constexpr std::string_view kFamily = "mla_verify";

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

}  // namespace

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kInProcess: return "in-process";
    case Mode::kRing: return "ring";
    case Mode::kRemote: return "remote";
    case Mode::kEmbedded: return "embedded";
  }
  return "?";
}

StatusOr<std::vector<Mode>> ParseModes(std::string_view text) {
  std::vector<Mode> out;
  for (absl::string_view part : absl::StrSplit(absl::string_view(text.data(), text.size()), ',', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    bool found = false;
    for (Mode m : {Mode::kInProcess, Mode::kRing, Mode::kRemote, Mode::kEmbedded}) {
      if (part == ModeName(m)) {
        out.push_back(m);
        found = true;
      }
    }
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat("unknown launch mode '", part,
                                                     "' (modes: in-process, ring, remote, embedded)"));
    }
  }
  if (out.empty()) return absl::InvalidArgumentError("no launch mode given");
  return out;
}

Status Client::ConnectOnce(const kjit_client_options& o) {
  if (connect_tried_) return connect_status_;
  connect_tried_ = true;
  const std::string name = o.client_name != nullptr ? o.client_name : absl::StrCat("kjit pid ", getpid());
  const bool session = (o.flags & KJIT_MODE_FLAG_NO_SESSION) == 0;
  // The token is for TCP: $KJIT_TOKEN_FILE is read only for a TCP target (a stray one must not stop a
  // client of the Unix socket); an explicit token_file always.
  const bool tcp = target_.rfind("unix:", 0) != 0;
  const char* token_file = o.token_file != nullptr ? o.token_file : tcp ? Env("KJIT_TOKEN_FILE") : nullptr;
  std::string token;
  if (token_file != nullptr) {
    auto read = ReadClientTokenFile(token_file);  // KJIT_TOKEN_FILE or kjit_client_options.token_file
    if (!read.ok()) return connect_status_ = read.status();
    token = *std::move(read);
  }
  auto link = DaemonLink::Connect(target_, std::chrono::milliseconds(o.deadline_ms), name, session, token);
  connect_status_ = link.status();
  if (link.ok()) link_ = *std::move(link);
  return connect_status_;
}

Status Client::TryMode(Mode m, const kjit_client_options& o) {
  const std::string family(kFamily);
  KJIT_ASSIGN_OR_RETURN(const kernels::KernelFamily* f, kernels::FindFamily(family));
  if (m == Mode::kEmbedded) {
    cache::Options copts;
    if (o.cache_dir != nullptr) copts.dir = o.cache_dir;
    cache_ = cache::CubinCache::Open(copts);
    if (!cache_->warning().empty()) Log(LogLevel::kWarn, cache_->warning());
    compiler_ = std::make_unique<kernels::KernelCompiler>(cache_.get());
    in_process_ = std::make_unique<InProcessLauncher>(f, [this, family](const std::string& arch)
                                                            -> StatusOr<std::vector<kernels::CompiledKernel>> {
      std::vector<kernels::CompiledKernel> out;
      for (auto& k : compiler_->GetAll(kernels::FamilySpecializations(family), {arch})) {
        if (!k.ok()) return k.status();
        out.push_back(*std::move(k));
      }
      return out;
    });
    describe_ = absl::StrCat("embedded: kernels compiled here with NVRTC into the cache at ", cache_->dir());
    return absl::OkStatus();
  }
  KJIT_RETURN_IF_ERROR(ConnectOnce(o));
  if (m == Mode::kInProcess) {
    in_process_ = std::make_unique<InProcessLauncher>(f, [this, family](const std::string& arch) {
      return link_->GetKernels(family, arch);
    });
    describe_ = absl::StrCat("in-process: cubins from kjitd at ", target_, ", launched on the caller's stream");
    return absl::OkStatus();
  }
  const bool events = (o.flags & KJIT_MODE_FLAG_EVENTS) != 0;
  KJIT_ASSIGN_OR_RETURN(remote_, RemoteLauncher::Create(link_.get(), family, m == Mode::kRing, events));
  describe_ = absl::StrCat(m == Mode::kRing ? "ring: ModelInfer through a launch ring" : "remote: ModelInfer over gRPC",
                           " to kjitd at ", target_, events ? ", ordered by CUDA IPC events" : ", synchronous");
  return absl::OkStatus();
}

StatusOr<std::unique_ptr<Client>> Client::Create(const kjit_client_options* options) {
  kjit_client_options o{};
  o.struct_size = sizeof(o);
  if (options != nullptr) {
    // Callers built before token_file pass the size up to it.
    constexpr uint64_t kBeforeTokenFile = offsetof(kjit_client_options, token_file);
    if (options->struct_size != sizeof(kjit_client_options) && options->struct_size != kBeforeTokenFile) {
      return absl::InvalidArgumentError(absl::StrCat("kjit_client_options.struct_size is ", options->struct_size,
                                                     "; this library takes ", sizeof(kjit_client_options)));
    }
    std::memcpy(&o, options, options->struct_size);
  }
  if (o.deadline_ms <= 0) {
    const char* env = Env("KJIT_DEADLINE_MS");
    o.deadline_ms = env != nullptr ? std::max(1L, std::strtol(env, nullptr, 10)) : 10000;
  }
  // "Forever" (INT64_MAX) would wrap the clocks' arithmetic into the past: at most 30 days.
  o.deadline_ms = std::min<int64_t>(o.deadline_ms, kMaxDeadlineMs);
  const char* modes_text = o.modes != nullptr ? o.modes : Env("KJIT_MODES");
  KJIT_ASSIGN_OR_RETURN(std::vector<Mode> modes, ParseModes(modes_text != nullptr ? modes_text : kDefaultModes));
  std::unique_ptr<Client> c(new Client());
  c->target_ = o.target != nullptr ? o.target : Env("KJIT_TARGET") != nullptr ? Env("KJIT_TARGET") : DefaultTarget();
  std::string refused;
  for (Mode m : modes) {
    const Status s = c->TryMode(m, o);
    if (s.ok()) {
      c->mode_ = m;
      if (!refused.empty()) absl::StrAppend(&c->describe_, "; not ", refused);
      Log(LogLevel::kInfo, c->describe_);
      return c;
    }
    absl::StrAppend(&refused, refused.empty() ? "" : ", ", ModeName(m), " (", s.message(), ")");
    c->in_process_.reset();
    c->remote_.reset();
  }
  return absl::FailedPreconditionError(absl::StrCat("no launch mode works: ", refused));
}

Status Client::Prepare(const std::string& arch) {
  if (in_process_ == nullptr) return absl::OkStatus();  // the daemon holds the kernels
  return in_process_->Prepare(arch);
}

Status Client::Verify(const kjit_mla_verify_args* caller_args, CUstream stream, uint64_t* workspace_needed) {
  *workspace_needed = 0;
  kjit_mla_verify_args storage;
  KJIT_ASSIGN_OR_RETURN(const kjit_mla_verify_args* args, CurrentVerifyArgs(caller_args, &storage));
  if (in_process_ != nullptr) return in_process_->Launch(*args, stream, workspace_needed);
  KJIT_ASSIGN_OR_RETURN(const VerifyCall call, DescribeVerify(*args));
  return remote_->Launch(call, args->device, stream);
}

Status Client::CheckErrors(int64_t device, CUstream stream) {
  // Through the daemon, kernel errors come back from the launches themselves.
  if (in_process_ == nullptr) return absl::OkStatus();
  return in_process_->CheckErrors(device, stream);
}

}  // namespace kjit::client
