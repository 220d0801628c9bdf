// libFuzzer: the launch ring as the daemon serves it. The input is what a client (or a scribbler)
// leaves in the ring's shared memory: header and request area. OpenRing checks the header; when it
// accepts, the poller serves whatever request the header announces, and the ring is closed again.
// Input byte 0, when odd, forces a valid magic and version so the rest of the header is explored.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>

#include "runtime/ipc/launch_ring.h"
#include "runtime/ipc/region_registry.h"
#include "runtime/server/ring_table.h"
#include "tests/fuzz/fuzz_shm.h"

namespace {

constexpr size_t kRingShm = 16384;

struct World {
  kjit::fuzz::ShmObject shm{kRingShm};
  kjit::ipc::RegionRegistry regions;
  kjit::server::RingTable rings{&regions};
  World() {
    auto region = std::make_shared<kjit::ipc::Region>();
    region->name = "ring";
    auto mapped = kjit::ipc::SystemShmRegion::Open(shm.key(), 0, shm.size());
    if (!mapped.ok()) __builtin_trap();
    region->system = *std::move(mapped);
    if (!regions.AddRegion(std::move(region)).ok()) __builtin_trap();
    shm.Unlink();  // mapped: the name is not needed again
    rings.SetSpin(std::chrono::microseconds(0));
    // A handler that answers from the parsed request: an error for an empty model name, else an
    // echo of its id as the response.
    rings.SetHandler([](const inference::ModelInferRequest& req, const kjit::ipc::Scope&,
                        inference::ModelInferResponse* resp) -> kjit::Status {
      if (req.model_name().empty()) return absl::InvalidArgumentError("no model");
      resp->set_id(req.id());
      return absl::OkStatus();
    });
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* world = new World;
  if (size == 0) return 0;
  uint8_t* mem = world->shm.data();
  std::memset(mem, 0, kRingShm);
  std::memcpy(mem, data + 1, std::min(size - 1, kRingShm));
  auto* h = reinterpret_cast<kjit::ipc::RingHeader*>(mem);
  if (data[0] & 1) {
    h->magic = kjit::ipc::kRingMagic;
    h->version = kjit::ipc::kRingVersion;
  }
  if (world->rings.Open("ring", "").ok()) {
    // Give the poller a moment to serve the announced request (if any), then stop it.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
    while (__atomic_load_n(&h->response_seq, __ATOMIC_ACQUIRE) != __atomic_load_n(&h->request_seq, __ATOMIC_ACQUIRE) &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
    world->rings.Close("ring", "");
  }
  return 0;
}
