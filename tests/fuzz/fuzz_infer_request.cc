// libFuzzer: bytes -> CheckInferRequestWire and inference.ModelInferRequest -> DecodeInferRequest ->
// the launcher's checks (schema, plan, region lookups, index pointers) against one registered system
// region, with no GPU. Every outcome must be a status; the sanitizers catch what is not.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "runtime/ipc/region_registry.h"
#include "runtime/launch/launcher.h"
#include "runtime/server/infer_decode.h"
#include "runtime/server/infer_wire.h"
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
  const bool parses = req.ParseFromArray(data + head, static_cast<int>(size - head));
  // The walk kjitd runs before the parse (infer_wire.h): it calls bytes malformed only where protobuf
  // fails too, and what it accepts parses within its limits.
  kjit::server::InferWireLimits limits;
  limits.max_contents_bytes = 4096;
  const kjit::Status wire = kjit::server::CheckInferRequestWire(
      std::string_view(reinterpret_cast<const char*>(data + head), size - head), limits);
  if (!wire.ok() && wire.message().find("not a serialized") != std::string_view::npos && parses) __builtin_trap();
  if (wire.ok() && parses) {
    if (req.inputs_size() > limits.kMaxTensors || req.outputs_size() > limits.kMaxTensors ||
        req.raw_input_contents_size() > limits.kMaxTensors || req.parameters_size() > limits.kMaxParameters) {
      __builtin_trap();
    }
    size_t typed = 0;
    for (const auto& t : req.inputs()) {
      const auto& c = t.contents();
      if (t.shape_size() > limits.kMaxDims || t.parameters_size() > limits.kMaxParameters) __builtin_trap();
      typed += c.bool_contents_size() + 4 * (c.int_contents_size() + c.uint_contents_size() + c.fp32_contents_size()) +
               8 * (c.int64_contents_size() + c.uint64_contents_size() + c.fp64_contents_size());
      for (const auto& b : c.bytes_contents()) typed += 32 + b.size();
    }
    if (typed > limits.max_contents_bytes) __builtin_trap();
  }
  if (!parses) return 0;
  kjit::server::DecodedInfer decoded;
  if (!kjit::server::DecodeInferRequest(req, &decoded).ok()) return 0;
  kjit::launch::LaunchResult result;
  const kjit::Status s = world->launcher.Run(decoded.request, &result);
  if (s.ok()) __builtin_trap();  // there is no GPU: a launch cannot succeed
  return 0;
}
