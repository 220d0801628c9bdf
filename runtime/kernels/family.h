// A kernel family as every layer sees it, in one descriptor: its name (the model name on the wire),
// tensor schema, parameters, specializations, checks, plan, launch and the meaning of its error bits.
// ModelMetadata, ModelConfig, the request decoder, ListKernels, `kjit compile`, the launcher and the
// in-process client all read it (registry.h lists the families). Plain types only: no transport.
//
// A launch goes through a family in this order:
//   KernelFamily::Check(tensor descriptions, parameters)  -> FamilyLaunch   (before any region lookup)
//   FamilyLaunch::CheckIndexPointers(host copies) or AssumeBounds()
//   FamilyLaunch::Plan(device)                           -> LaunchNeeds     (workspace, error word)
//   FamilyLaunch::Enqueue(kernels, addresses, stream)     (no allocation, no sync: graph-capturable)
//   FamilyLaunch::ErrorStatus(error word)                 after the work has run
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/kernels/catalog.h"

namespace kjit::kernels {

// Datatype names of the inference protocol and their element sizes (0 for BYTES and unknowns).
size_t DatatypeSize(std::string_view datatype);

// The number of elements of a shape: nullopt for a negative dimension or a count past 2^64 - 1.
std::optional<uint64_t> ShapeElements(std::span<const int64_t> shape);
// A client's shape for a message, bounded: a rank in the thousands is shown as its first dimensions.
std::string ShapeText(std::span<const int64_t> shape);

// One tensor of a request as the transport describes it. byte_size is the exact number of bytes
// supplied (inputs) or the capacity (outputs). strides (in elements) are given only by callers that
// pass views of larger tensors (the in-process client); empty means row-major, and then byte_size
// covers the elements exactly; with strides it covers the span from the first to the last element.
struct TensorDesc {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
  uint64_t byte_size = 0;
  std::vector<int64_t> strides = {};
};

// A tensor the family takes or writes, as ModelMetadata and ModelConfig show it.
struct TensorSchema {
  std::string name;
  std::vector<std::string> datatypes;  // accepted; the first is the usual one
  std::vector<int64_t> shape;          // -1: variable
  bool optional = false;
  // An index pointer whose contents the host reads, to check the launch and plan it exactly,
  // unless the request gives the bounds the kernels then check themselves.
  bool index_pointer = false;
};

// A request parameter. Values arrive as the transport typed them and are converted once, by kind.
struct ParamSchema {
  enum class Kind {
    kNumber,  // double; also an int64, uint64 or numeric string
    kBool,    // bool; also an int64 or "true"/"false"
    kInt,     // int64 (or a uint64 that fits) in [min, max]
    kString,  // a non-empty string
  };
  std::string name;
  Kind kind = Kind::kNumber;
  bool required = false;
  int64_t min = INT64_MIN, max = INT64_MAX;  // kInt only
};

// A parameter as a transport carries it.
using ParamValue = std::variant<bool, int64_t, uint64_t, double, std::string>;
struct Param {
  std::string name;
  ParamValue value;
};

// Parameters converted by their schema: one entry per schema parameter, monostate when not given.
using TypedParam = std::variant<std::monostate, bool, int64_t, double, std::string>;
using TypedParams = std::vector<TypedParam>;

// The parameter names a client may send that kjit ignores (PROTOCOL.md "reserved").
bool IsReservedParameter(std::string_view name);

// Converts `params` by `schemas` (which may be the family's and the launch layer's together): an
// unknown name, a value of the wrong kind or out of range, or a required parameter missing is
// INVALID_ARGUMENT naming it; reserved names are skipped. The result has one entry per schema, in
// `schemas`' order.
StatusOr<TypedParams> ConvertParams(std::span<const ParamSchema> schemas, std::span<const Param> params);

// What a planned launch needs from its caller.
struct LaunchNeeds {
  size_t workspace_bytes = 0;    // on the launching device, 256-byte aligned, no contents kept
  size_t error_word_offset = 0;  // in the workspace: the uint32 error bits after the launch
  // The kernels can store the error word at LaunchAddresses::error_word instead (for example host
  // memory mapped into the device, read after a synchronization with no copy queued).
  bool stores_error_word = false;
};

// Device addresses of one launch, by schema position (0: the tensor is absent).
struct LaunchAddresses {
  std::vector<CUdeviceptr> inputs, outputs;
  CUdeviceptr workspace = 0;
  CUdeviceptr error_word = 0;  // 0: the workspace's (LaunchNeeds::error_word_offset)
  // Optional: a word the kernels OR every nonzero error bit into and never clear (an in-process
  // caller reads it at its own sync points; the daemon reads each launch's error word instead).
  CUdeviceptr accumulated_error_word = 0;
};

// One launch of a family whose tensor descriptions and parameters passed the family's checks.
class FamilyLaunch {
 public:
  virtual ~FamilyLaunch() = default;
  // Where each schema tensor is in the request's lists (-1: absent), as the checks found them.
  virtual std::span<const int> input_slots() const = 0;
  virtual std::span<const int> output_slots() const = 0;
  // True when the request bounds what the index pointers may hold (for mla_verify kjit_max_draft),
  // so the launch may leave their contents to the kernels' own checks.
  virtual bool has_bounds() const = 0;
  // The contents of the schema's index_pointer inputs, by schema position (empty spans elsewhere):
  // checks them and plans from their exact extents. The launch must then use exactly these bytes.
  virtual Status CheckIndexPointers(std::span<const std::span<const uint8_t>> by_input) = 0;
  // No host copies: plans from the request's bounds, else from what the shapes allow; the kernels
  // check every index pointer against the validated sizes and report through the error word.
  virtual void AssumeBounds() = 0;
  // After CheckIndexPointers or AssumeBounds: the plan for `device` (kept in the launch).
  virtual StatusOr<LaunchNeeds> Plan(const driver::DeviceInfo& device) = 0;
  // Queues the planned kernels on `stream`.
  virtual Status Enqueue(const KernelTable& kernels, const LaunchAddresses& addresses, CUstream stream) const = 0;
  // The error word's meaning once the launch has run: OK for 0.
  virtual Status ErrorStatus(uint32_t error_word) const = 0;
};

class KernelFamily {
 public:
  virtual ~KernelFamily() = default;
  virtual std::string_view name() const = 0;
  virtual std::span<const TensorSchema> inputs() const = 0;
  virtual std::span<const TensorSchema> outputs() const = 0;
  virtual std::span<const ParamSchema> params() const = 0;
  // How the optional inputs combine, in words (ModelConfig shows it), e.g. "a|b (exactly one)".
  virtual std::string_view optional_inputs_rule() const = 0;
  // The NVRTC programs the family needs (catalog.h), in a fixed order.
  virtual std::vector<Specialization> Specializations() const = 0;
  // The shape of output `output` (schema position) that the inputs imply: what a transport uses for
  // an output whose shape the client does not give. Inputs may be invalid (then any shape).
  virtual std::vector<int64_t> OutputShape(size_t output, std::span<const TensorDesc> inputs) const = 0;
  // Every check that needs only the descriptions and the parameters (converted by params(), in
  // its order): INVALID_ARGUMENT naming the tensor or parameter to fix.
  virtual StatusOr<std::unique_ptr<FamilyLaunch>> Check(std::span<const TensorDesc> inputs,
                                                        std::span<const TensorDesc> outputs,
                                                        const TypedParams& params) const = 0;
  // The meaning of error bits its kernels set (OK for 0), outside any one launch: for a word that
  // gathers the bits of many (LaunchAddresses::accumulated_error_word).
  virtual Status ErrorStatus(uint32_t error_word) const = 0;
};

// Schema position of `name`, or -1.
int SchemaIndex(std::span<const TensorSchema> schema, std::string_view name);

}  // namespace kjit::kernels
