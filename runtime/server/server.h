// Builds the gRPC server (Unix socket, optional TCP, health, reflection, max message sizes),
// serves until SIGINT/SIGTERM, then shuts down in order.
#pragma once

#include "runtime/server/daemon.h"

namespace kjit::server {

// Runs kjitd: flags already parsed. Returns when a stop signal arrived and the shutdown finished;
// non-OK when the daemon could not start.
Status RunDaemon(const Flags& flags);

}  // namespace kjit::server
