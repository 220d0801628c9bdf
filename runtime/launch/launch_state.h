// The launcher's working state of one request (launcher.cc runs the steps; locate.cc finds the
// bytes and checks index pointers). Internal to runtime/launch.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/ipc/region_registry.h"
#include "runtime/kernels/family.h"
#include "runtime/launch/device_runtime.h"
#include "runtime/launch/launch_request.h"

namespace kjit::launch::internal {

// Where a tensor's bytes are once located.
struct Located {
  enum class Where {
    kHost,    // the request's memory, or a checked copy of an index pointer
    kShared,  // a system shared memory region: copied under the SIGBUS guard
    kCuda,    // a CUDA region on the launch's GPU
  } where = Where::kHost;
  const uint8_t* host = nullptr;  // kHost, kShared
  CUdeviceptr device = 0;         // kCuda
  uint64_t bytes = 0;
  std::shared_ptr<const ipc::Region> region;  // held until the launch has run
  std::vector<uint8_t> checked;  // an index pointer's validated copy: what the launch stages
};

struct LaunchState {
  const LaunchRequest* request = nullptr;
  const kernels::KernelFamily* family = nullptr;
  std::unique_ptr<kernels::FamilyLaunch> launch;
  std::vector<Located> inputs, outputs;  // by request position
  int64_t device = 0;
  std::string wait_name, signal_name;  // kjit_wait_event / kjit_signal_event ("": none)
  std::shared_ptr<const ipc::NamedEvent> wait, signal;
  bool async() const { return !signal_name.empty(); }
};

// The family's checks on the request's descriptions and parameters (the family's and the launch
// layer's); fills s->family, s->launch, the launch parameters and result->family / outputs.
Status Check(const LaunchRequest& request, LaunchState* s, LaunchResult* result);

// Work queued on a stream that memory in use must outlive: when armed, the destructor synchronizes
// the stream (an error return after a copy was queued waits for it before the staging, the regions
// and the words go back).
struct QueuedWork {
  const driver::Api* api;
  CUstream stream;
  bool armed = false;
  ~QueuedWork() {
    if (armed) (void)api->cuStreamSynchronize(stream);
  }
};

// The bytes of a located host or shared tensor.
inline const uint8_t* HostBytes(const Located& l) { return l.checked.empty() ? l.host : l.checked.data(); }

// "tensor 'q' (region 'r')": for messages about a tensor's memory.
std::string TensorWhere(const LaunchState& s, size_t input);

// Regions and events of the request looked up (NOT_FOUND for unknown names) and every tensor's byte
// range checked against its region; every output of an asynchronous launch must be in a CUDA region
// (INVALID_ARGUMENT).
Status Locate(const ipc::RegionRegistry& regions, LaunchState* s);

// The one device check: every CUDA region and event of the launch is on GPU `ordinal`.
Status CheckDevice(const LaunchState& s, int ordinal);

// True when an index pointer input lives in a CUDA region.
bool IndexPointersOnDevice(const LaunchState& s);

// Reads the family's index pointers (host and shared ones here; CUDA ones from `device_copies`,
// read back by the caller: by schema position, null where none) and has the family check them. On
// success every index pointer becomes its checked host copy, whatever the client writes afterwards.
Status CheckIndexPointers(LaunchState* s, std::span<const uint8_t* const> device_copies = {});

// Device-resident index pointers of a synchronous launch read back on the device's read-back stream
// (its client's wait event has completed: Launcher::Run) into page-locked memory, one
// synchronization, then checked. Hold the device's mutex.
Status ReadBackIndexPointers(DeviceRuntime* dev, LaunchState* s);

}  // namespace kjit::launch::internal
