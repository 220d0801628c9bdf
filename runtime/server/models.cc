#include "runtime/server/models.h"

#include <chrono>
#include <memory>

namespace kjit::server {
namespace {

ModelSpec MlaVerifySchema(const std::string& name) {
  return ModelSpec{
      name,
      {
          {"q", "BF16", {-1, -1, 576}},
          {"k_extend", "BF16", {-1, 1, 576}},
          {"kv_cache", "BF16", {-1, 1, 576}},
          {"qo_indptr", "INT32", {-1}},
          {"kv_indptr", "INT32", {-1}},
          {"kv_indices", "INT64", {-1}},
          {"custom_mask", "BOOL|UINT8", {-1}, true},
          {"packed_mask", "UINT32", {-1}, true},
          {"mask_indptr", "INT64", {-1}, true},
      },
      {
          {"o", "BF16", {-1, -1, 512}},
          {"lse", "FP32", {-1, -1}, true},
      }};
}

}  // namespace

const std::vector<ModelSpec>& Models() {
  static const auto* models =
      new std::vector<ModelSpec>{MlaVerifySchema("mla_verify"), MlaVerifySchema("mla_verify_naive")};
  return *models;
}

StatusOr<const ModelSpec*> FindModel(const std::string& name, const std::string& version) {
  for (const ModelSpec& m : Models()) {
    if (m.name != name) continue;
    if (!version.empty() && version != kModelVersion) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", name, "' has no version '", version, "' (only ", kModelVersion, ")"));
    }
    return &m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model '", name, "' (models: mla_verify, mla_verify_naive)"));
}

void ModelCounters::Record(bool ok, uint64_t total_ns, uint64_t compute) {
  (ok ? success_count : fail_count).fetch_add(1, std::memory_order_relaxed);
  (ok ? success_ns : fail_ns).fetch_add(total_ns, std::memory_order_relaxed);
  compute_ns.fetch_add(compute, std::memory_order_relaxed);
  last_inference_ms.store(std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count(),
                          std::memory_order_relaxed);
}

ModelCounters& CountersOf(size_t model_index) {
  static auto* counters = new std::unique_ptr<ModelCounters[]>(new ModelCounters[Models().size()]);
  return (*counters)[model_index];
}

size_t ModelIndex(const ModelSpec* model) { return static_cast<size_t>(model - Models().data()); }

}  // namespace kjit::server
