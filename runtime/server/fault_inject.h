// Test only: the model kjit_fault_inject, served only when kjitd runs with
// --enable-fault-injection (off by default; without the flag the name is an unknown model like any
// other). Its launch writes to an invalid device address, so the GPU's context is poisoned: the call
// answers UNAVAILABLE, the daemon turns NOT_SERVING and exits 1 for its supervisor, as after any
// sticky CUDA error (ARCHITECTURE.md "Errors"). tests/gpu/e2e_fault.sh drives it.
#pragma once

#include "inference/grpc_service.pb.h"
#include "runtime/server/daemon.h"

namespace kjit::server {

inline constexpr char kFaultInjectModel[] = "kjit_fault_inject";

// Whether `req` is for the fault model and this daemon serves it.
bool IsFaultInjection(const Daemon& d, const inference::ModelInferRequest& req);

// Launches the faulting kernel on the request's kjit_device (default 0). FAILED_PRECONDITION in
// compile-only mode; UNAVAILABLE once the fault poisoned the context.
Status InjectFault(Daemon* d, const inference::ModelInferRequest& req);

}  // namespace kjit::server
