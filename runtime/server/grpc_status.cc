#include "runtime/server/grpc_status.h"

#include <string>

namespace kjit::server {

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbering (0..16).
  const int code = static_cast<int>(s.code());
  const auto grpc_code = (code >= 0 && code <= 16) ? static_cast<grpc::StatusCode>(code)
                                                   : grpc::StatusCode::UNKNOWN;
  return grpc::Status(grpc_code, std::string(s.message()));
}

}  // namespace kjit::server
