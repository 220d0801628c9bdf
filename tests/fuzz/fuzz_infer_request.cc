// libFuzzer: bytes -> inference.ModelInferRequest -> DecodeInferRequest -> the launcher's checks
// (schema, plan, region lookups, index pointers) against one registered system region, with no GPU.
// Every outcome must be a status; the sanitizers catch what is not.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "runtime/ipc/region_registry.h"
#include "runtime/launch/launcher.h"
#include "runtime/server/infer_decode.h"
#include "tests/fuzz/fuzz_shm.h"

namespace {

struct World {
  kjit::fuzz::ShmObject shm{1 << 16};
  kjit::ipc::RegionRegistry regions;
  kjit::launch::Launcher launcher{kjit::launch::Launcher::Options{
      &regions,
      [](int64_t) -> kjit::StatusOr<kjit::launch::DeviceRuntime*> {
        return absl::FailedPreconditionError("no GPU in the fuzzer");
      },
      [](const std::string&) {}}};
  World() {
    for (const char* name : {"r", "shm", "region"}) {
      auto region = std::make_shared<kjit::ipc::Region>();
      region->name = name;
      auto mapped = kjit::ipc::SystemShmRegion::Open(shm.key(), 0, shm.size());
      if (!mapped.ok()) __builtin_trap();
      region->system = *std::move(mapped);
      (void)regions.AddRegion(std::move(region));
    }
    shm.Unlink();  // mapped: the name is not needed again
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* world = new World;
  // The first 256 bytes (at most) are what the registered region holds: index pointers and masks
  // placed there are read by the checks.
  const size_t head = size < 256 ? size : 256;
  std::memcpy(world->shm.data(), data, head);
  inference::ModelInferRequest req;
  if (!req.ParseFromArray(data + head, static_cast<int>(size - head))) return 0;
  kjit::server::DecodedInfer decoded;
  if (!kjit::server::DecodeInferRequest(req, &decoded).ok()) return 0;
  kjit::launch::LaunchResult result;
  const kjit::Status s = world->launcher.Run(decoded.request, &result);
  if (s.ok()) __builtin_trap();  // there is no GPU: a launch cannot succeed
  return 0;
}
