// The models kjitd serves (one per kernel family with the mla_verify schema) and their statistics.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/common/status.h"

namespace kjit::server {

struct TensorSpec {
  std::string name;
  std::string datatype;        // protocol name; alternatives after '|' (e.g. "BOOL|UINT8")
  std::vector<int64_t> shape;  // -1: variable
  bool optional = false;
};

struct ModelSpec {
  std::string name;  // == kernel family
  std::vector<TensorSpec> inputs, outputs;
};

inline constexpr char kModelVersion[] = "1";
inline constexpr char kPlatform[] = "kjit";
inline constexpr char kBackend[] = "nvrtc";

const std::vector<ModelSpec>& Models();
// INVALID_ARGUMENT for an unknown model or a version other than "" / "1".
StatusOr<const ModelSpec*> FindModel(const std::string& name, const std::string& version);

// Launch counters of one model (ModelStatistics), updated lock-free.
struct ModelCounters {
  std::atomic<uint64_t> success_count{0}, success_ns{0};
  std::atomic<uint64_t> fail_count{0}, fail_ns{0};
  std::atomic<uint64_t> compute_ns{0};
  std::atomic<uint64_t> last_inference_ms{0};
  void Record(bool ok, uint64_t total_ns, uint64_t compute);
};

// Counters for Models()[i].
ModelCounters& CountersOf(size_t model_index);
size_t ModelIndex(const ModelSpec* model);

}  // namespace kjit::server
