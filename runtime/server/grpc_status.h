// The one place a kjit Status becomes a gRPC status (ARCHITECTURE.md "Errors").
#pragma once

#include <grpcpp/support/status.h>

#include "runtime/common/status.h"

namespace kjit::server {

grpc::Status ToGrpc(const Status& s);

}  // namespace kjit::server
