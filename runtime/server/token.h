// The optional shared token of TCP clients (kjitd --token-file). gRPC runs no
// AuthMetadataProcessor on an insecure port, so every handler calls CheckToken first (the
// asynchronous ones through grpc_queues.cc). Calls over the Unix socket are exempt: its perimeter
// is the socket's mode and SO_PEERCRED. The health service and server reflection (where served:
// flags.h, ReflectionServed) stay open, so probes work without the token.
#pragma once

#include <grpcpp/server_context.h>

#include <string>
#include <string_view>

#include "runtime/common/daemon_target.h"  // kTokenMetadataKey, the clients' side
#include "runtime/common/status.h"

namespace kjit::server {


// The token in `path`: a regular file owned by kjitd's user (or root) that no other user may read
// or write (mode 0600 or 0400), at most 4 KiB, one line of printable ASCII without spaces (a
// trailing newline is dropped), at least 16 characters. FAILED_PRECONDITION saying what to fix.
StatusOr<std::string> ReadTokenFile(const std::string& path);

// Whether `presented` equals `token`, in time that depends only on presented's length.
bool TokenMatches(std::string_view presented, std::string_view token);

// OK when `token` is empty, for a call over the Unix socket, and for a call whose kjit-token
// metadata matches; UNAUTHENTICATED saying what to send otherwise.
grpc::Status CheckToken(const grpc::ServerContext& ctx, const std::string& token);

// The first line of every synchronous handler: returns CheckToken's refusal.
#define KJIT_CHECK_TOKEN(ctx, token)                                                                 \
  if (grpc::Status kjit_token_refused = ::kjit::server::CheckToken((ctx), (token)); !kjit_token_refused.ok()) \
  return kjit_token_refused

}  // namespace kjit::server
