// Launch rings served by kjitd (ipc/launch_ring.h): a client turns a registered system shared memory
// region into a ring with kjit.v1.KernelService/OpenRing, and a poller thread of the daemon runs the
// ModelInfer requests it finds there through the same handler as the gRPC call. A ring lives until
// CloseRing, until its region is unregistered (or released with its session), or until the daemon
// stops; its poller holds the region's mapping meanwhile. A poller that stops by itself (its region
// gone) is dropped at once by the table's janitor thread, and with it the mapping.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "inference/grpc_service.pb.h"
#include "runtime/ipc/region_registry.h"

namespace kjit::server {

// A ring's requests run as the ring's region's registrant (its session and identity).
using InferHandler = std::function<Status(const inference::ModelInferRequest&, const ipc::Scope& session,
                                          inference::ModelInferResponse*)>;

class RingPoller;

class RingTable {
 public:
  explicit RingTable(const ipc::RegionRegistry* regions);  // out of line: RingPoller is complete there
  ~RingTable();
  // The handler every ring's requests go to: set once, before the first Open.
  void SetHandler(InferHandler handler) { handler_ = std::move(handler); }
  // How long a poller spins after a request before it sleeps (rings opened later).
  void SetSpin(std::chrono::microseconds spin) { spin_ = spin; }

  // At most this many rings (each is a poller thread), and of them at most ipc::IdentityShare on one
  // user's regions: RESOURCE_EXHAUSTED past either.
  void SetMaxRings(size_t max_rings) { max_rings_ = max_rings; }
  static constexpr size_t kDefaultMaxRings = 64;
  // The largest request a ring's poller copies in, and the largest response it writes, as a gRPC
  // message (--max-request-bytes): RESOURCE_EXHAUSTED past it (rings opened later).
  void SetMaxMessageBytes(uint64_t bytes) { max_message_ = bytes; }

  // Starts a poller on the named region, as `session` sees it. NOT_FOUND for an unknown region;
  // INVALID_ARGUMENT when it is CUDA memory or does not hold a valid ring header
  // (ipc::RingClient::Create writes one) of a capacity that fits it (at most 2^31 bytes); ALREADY_EXISTS when the region
  // is a ring already, or its ring's bytes are another open ring's (the same object under another
  // name); RESOURCE_EXHAUSTED at the cap. Returns the capacity.
  StatusOr<uint32_t> Open(const std::string& region, const ipc::Scope& session);
  // Stops the poller of the region `session` sees (waits for the request it is serving); an
  // unknown or unseen name is OK.
  void Close(const std::string& region, const ipc::Scope& session);
  // Stops every poller (daemon exit, before the devices go): all are told first, then joined, so
  // the rings stop together instead of one after another's request.
  void Clear();
  size_t Count();  // rings being polled (status and metrics)
  size_t max_rings() const { return max_rings_; }

 private:
  const ipc::RegionRegistry* regions_;
  InferHandler handler_;
  std::chrono::microseconds spin_{200};
  size_t max_rings_ = kDefaultMaxRings;
  uint64_t max_message_ = uint64_t{128} << 20;
  std::mutex mu_;
  // Held by the poller serving a request larger than RequestCache::kKeepBytes: one at a time.
  std::timed_mutex large_request_;
  // By the region's key: region names are per identity.
  using Key = ipc::RegionRegistry::Key;
  std::map<Key, std::unique_ptr<RingPoller>> rings_;
  void PruneLocked();  // drops pollers that stopped by themselves (region gone)

  // The janitor: drops each poller that stopped by itself as soon as it has (PollerFinished), so
  // that an unregistered ring's mapping goes then, not at the next OpenRing (until which the
  // memory stayed mapped while no longer counted against --max-system-shm-bytes).
  void PollerFinished();
  void Janitor();
  std::mutex janitor_mu_;
  std::condition_variable janitor_cv_;
  bool janitor_stop_ = false;     // under janitor_mu_
  uint64_t finished_pollers_ = 0;  // under janitor_mu_: pollers that left Run since the last prune
  std::thread janitor_;           // last: started once the members above exist
};

}  // namespace kjit::server
