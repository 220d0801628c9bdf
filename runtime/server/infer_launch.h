// A validated ModelInfer on one GPU: stage inline/system-memory tensors into daemon device memory,
// plan, optionally wait on the client's IPC event, launch on the device's stream, then either
// synchronize (report the kernel's error word, return outputs) or record the client's signal
// event and return at once.
#pragma once

#include "inference/grpc_service.pb.h"
#include "runtime/server/daemon.h"
#include "runtime/server/infer_request.h"

namespace kjit::server {

// Fills resp's outputs and raw_output_contents (one entry per output, empty for region outputs).
// *compute_ns: launch-to-sync time on the host.
Status RunInfer(Daemon* d, DeviceRuntime* dev, ParsedInfer* p, inference::ModelInferResponse* resp,
                uint64_t* compute_ns);

}  // namespace kjit::server
