// protobuf's and gRPC's own log lines go through kjit's log: one line each, rate-limited per source
// location (a client that sends a thousand malformed messages gets one line every 10 seconds, not a
// thousand).
#pragma once

namespace kjit::server {

void RouteLibraryLogs();

}  // namespace kjit::server
