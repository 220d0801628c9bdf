#include "runtime/server/token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kjit::server {
namespace {

constexpr size_t kMaxTokenFileBytes = 4096;
constexpr size_t kMinTokenChars = 16;

Status Refuse(const std::string& path, absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrCat("--token-file ", path, ": ", why));
}

}  // namespace

StatusOr<std::string> ReadTokenFile(const std::string& path) {
  // O_NONBLOCK: a FIFO must not block startup (it is refused below).
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Refuse(path, absl::StrCat("cannot open it: ", std::strerror(errno)));
  struct stat st;
  std::string text;
  Status s = absl::OkStatus();
  if (fstat(fd, &st) != 0) {
    s = Refuse(path, absl::StrCat("cannot stat it: ", std::strerror(errno)));
  } else if (!S_ISREG(st.st_mode)) {
    s = Refuse(path, "is not a regular file");
  } else if (st.st_uid != geteuid() && st.st_uid != 0) {
    s = Refuse(path, absl::StrCat("belongs to uid ", st.st_uid, ", not to kjitd's user (uid ", geteuid(),
                                  ") or root"));
  } else if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    s = Refuse(path, absl::StrCat("other users may read or write it (mode ", mode,
                                  "): make it readable by its owner only (chmod 600)"));
  } else if (static_cast<uint64_t>(st.st_size) > kMaxTokenFileBytes) {
    s = Refuse(path, absl::StrCat("is ", st.st_size, " bytes; a token is one line (at most ", kMaxTokenFileBytes,
                                  " bytes)"));
  } else {
    char buf[kMaxTokenFileBytes + 1];
    ssize_t n = 0;
    while ((n = read(fd, buf, sizeof(buf))) > 0 && text.size() <= kMaxTokenFileBytes) text.append(buf, n);
    if (n < 0) s = Refuse(path, absl::StrCat("cannot read it: ", std::strerror(errno)));
  }
  close(fd);
  KJIT_RETURN_IF_ERROR(s);
  text = TokenTextOf(std::move(text));
  if (text.empty()) return Refuse(path, "is empty: write a token into it (e.g. openssl rand -hex 32)");
  if (!IsTokenText(text)) {
    return Refuse(path, "holds a character other than printable ASCII without spaces (the token travels as "
                        "gRPC metadata): write one line such as the output of openssl rand -hex 32");
  }
  if (text.size() < kMinTokenChars) {
    return Refuse(path, absl::StrCat("the token has ", text.size(), " characters; use at least ", kMinTokenChars,
                                     " (e.g. openssl rand -hex 32)"));
  }
  return text;
}

bool TokenMatches(std::string_view presented, std::string_view token) {
  if (token.empty()) return false;
  // Every presented byte is compared (against the token repeated), so the time says nothing about
  // where the first difference is or how long the token is.
  unsigned char diff = presented.size() == token.size() ? 0 : 1;
  for (size_t i = 0; i < presented.size(); ++i) {
    diff |= static_cast<unsigned char>(presented[i] ^ token[i % token.size()]);
  }
  return diff == 0;
}

grpc::Status CheckToken(const grpc::ServerContext& ctx, const std::string& token) {
  if (token.empty()) return grpc::Status::OK;
  // kjitd hands its Unix socket's connections to gRPC by descriptor (unix_listener.h): "fd:N".
  if (absl::StartsWith(ctx.peer(), "fd:")) return grpc::Status::OK;
  const auto& md = ctx.client_metadata();
  const auto it = md.find(kTokenMetadataKey);
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "kjitd requires a token over TCP: send the contents of its --token-file as gRPC metadata "
                        "'kjit-token' (libkjit_client and the kjit package: set KJIT_TOKEN_FILE), or use the "
                        "Unix socket");
  }
  if (!TokenMatches(std::string_view(it->second.data(), it->second.size()), token)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "kjitd refused the 'kjit-token' metadata: it is not the token of kjitd's --token-file");
  }
  return grpc::Status::OK;
}

}  // namespace kjit::server
