// e2e_ipc_client --mode stuck (e2e_stuck_wait.cc): bounded answers around a kjit_wait_event that does
// not complete.
#pragma once

#include "tests/e2e/e2e_client.h"

namespace kjit::e2e {

// The kjitd under test runs with --launch-timeout-ms kStuckTimeoutMs.
constexpr int kStuckTimeoutMs = 1500;
Status RunStuck(Client* x);

}  // namespace kjit::e2e
