// Launches through kjitd (the ring and remote modes): every tensor as a CUDA IPC region of its
// allocation (registered once per cudaMalloc block and found again by the driver's buffer id, so a
// block freed and reused is registered anew), a ModelInferRequest naming regions and offsets, sent
// over the shared-memory launch ring or gRPC. Synchronous (the caller's stream is synchronized
// before the request) or ordered by CUDA IPC events (no host wait).
//
// kjitd restarted: its regions, events and rings are gone. With a session, the session's stream
// ends with the old daemon and the next launch opens a new session and registers everything
// again (a new ring too); while the daemon is away a launch answers UNAVAILABLE within the
// deadline. Without a session, a launch answered NOT_FOUND (an unknown region or event) registers
// again and is sent once more; so is a ring call that goes unanswered while kjitd, asked over gRPC,
// no longer knows the ring. An unanswered ring is never used again: the next launch opens a new one.
#pragma once

#include <cuda.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "client/cpp/src/daemon_link.h"
#include "client/cpp/src/verify_args.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/ipc/launch_ring.h"

namespace kjit::client {

class RemoteLauncher {
 public:
  // With `ring`, opens a launch ring (system shared memory registered under the link's session);
  // with `events`, launches are ordered by IPC events instead of synchronizing the caller's stream.
  static StatusOr<std::unique_ptr<RemoteLauncher>> Create(DaemonLink* link, std::string_view model, bool ring,
                                                          bool events);
  ~RemoteLauncher();

  Status Launch(const VerifyCall& call, int64_t device, CUstream stream);
  bool ring() const { return ring_.has_value(); }
  // Before a launch: when the link's session was replaced (or a launch found its registrations
  // gone), forgets every registration and opens a new ring. UNAVAILABLE while kjitd is away.
  Status Resync();
  const std::string& ring_region() const { return ring_region_; }

 private:
  RemoteLauncher(DaemonLink* link, std::string model, bool events)
      : link_(link), model_(std::move(model)), events_(events), generation_(link->generation()) {}
  struct Device {
    int64_t daemon_ordinal = 0;  // kjit_device / device_id: the daemon's numbering
    std::string uuid;
    std::optional<driver::Context> context;
    std::optional<driver::Event> ready, done;  // interprocess events, registered as below
    std::string ready_name, done_name;
  };
  struct Allocation {
    std::string region;
    CUdeviceptr base = 0;
    size_t size = 0;
    unsigned long long buffer_id = 0;
  };
  Status OpenRing();
  void CloseRing();  // this side only: unmaps the ring (and unlinks its object, if not yet done)
  // Every region, event and the ring, best effort (the destructor, a resync); a daemon that leaves
  // one call unanswered is not asked the rest.
  void UnregisterAll();
  // The ring's region, or one CUDA IPC region, best effort: whether kjitd answered.
  bool UnregisterRing();
  bool UnregisterCuda(const std::string& region);
  // Registers what `call` names and sends it: NOT_FOUND when kjitd no longer knows a registration.
  Status SendCall(const VerifyCall& call, Device* d, CUstream stream);
  StatusOr<Device*> DeviceFor(int64_t ordinal);
  // The region holding [ptr, ptr + bytes) and the offset of ptr in it.
  StatusOr<std::pair<std::string, uint64_t>> RegionFor(CUdeviceptr ptr, uint64_t bytes, const Device& d);
  Status Send(const inference::ModelInferRequest& req);
  std::string NewName(std::string_view what);

  DaemonLink* link_;
  std::string model_;
  bool events_;
  bool want_ring_ = false;
  uint64_t generation_;  // the link's generation() the registrations below were made in
  bool stale_ = false;   // a launch found them gone
  bool ring_timed_out_ = false;  // a ring call went unanswered: the next launch opens a new ring
  std::mutex mu_;  // one launch at a time: the ring has one slot, registrations are shared
  std::map<int64_t, std::unique_ptr<Device>> devices_;
  std::map<CUdeviceptr, Allocation> allocations_;  // by base
  std::vector<const Allocation*> checked_;          // the allocations this launch has queried
  inference::ModelInferRequest request_;
  // The launch ring: a POSIX shared memory object of ours, mapped, registered and opened.
  std::string ring_key_, ring_region_;
  void* ring_map_ = nullptr;
  size_t ring_bytes_ = 0;
  std::optional<ipc::RingClient> ring_;
  std::string request_bytes_, response_bytes_, message_;
};

}  // namespace kjit::client
