#include "runtime/server/bounded_methods.h"

#include "absl/strings/str_cat.h"
#include "runtime/server/token.h"

namespace kjit::server {

grpc::Status CheckControlRequest(const grpc::ServerContext& ctx, const std::string* token,
                                 const grpc::ByteBuffer& bytes, const std::string& type) {
  if (token != nullptr) {
    if (grpc::Status refused = CheckToken(ctx, *token); !refused.ok()) return refused;
  }
  if (bytes.Length() > kMaxControlRequestBytes) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("a ", type, " of ", bytes.Length(), " bytes: kjitd takes at most ",
                                     kMaxControlRequestBytes,
                                     " for it (only ModelInfer takes up to --max-request-bytes)"));
  }
  return grpc::Status::OK;
}

}  // namespace kjit::server
