#include "runtime/server/infer_decode.h"

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/common/client_text.h"
#include "runtime/kernels/registry.h"

namespace kjit::server {
namespace {

using Param = inference::InferParameter;
using launch::TensorArg;

// The wire value as the transport typed it; the launcher converts it by the parameter's schema.
StatusOr<kernels::ParamValue> WireValue(const std::string& name, const Param& p) {
  switch (p.parameter_choice_case()) {
    case Param::kBoolParam: return p.bool_param();
    case Param::kInt64Param: return p.int64_param();
    case Param::kUint64Param: return p.uint64_param();
    case Param::kDoubleParam: return p.double_param();
    case Param::kStringParam: return p.string_param();
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("parameter '", ClientText(name), "' has no value"));
}

StatusOr<int64_t> WireInt(const char* name, const Param& p) {
  if (p.parameter_choice_case() == Param::kInt64Param) return p.int64_param();
  if (p.parameter_choice_case() == Param::kUint64Param &&
      p.uint64_param() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(p.uint64_param());
  }
  return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' must be an int64"));
}

// shared_memory_* parameters of one tensor: a region source, or kind kHost when there are none.
Status DecodeShm(const std::string& tensor, const google::protobuf::Map<std::string, Param>& params, TensorArg* t) {
  auto region_it = params.find("shared_memory_region");
  auto size_it = params.find("shared_memory_byte_size");
  auto offset_it = params.find("shared_memory_offset");
  auto where = [&tensor] { return absl::StrCat("tensor '", ClientText(tensor), "'"); };
  if (region_it == params.end()) {
    if (size_it != params.end() || offset_it != params.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": shared_memory_byte_size/offset given without shared_memory_region"));
    }
    return absl::OkStatus();
  }
  if (region_it->second.parameter_choice_case() != Param::kStringParam || region_it->second.string_param().empty()) {
    return absl::InvalidArgumentError("parameter 'shared_memory_region' must be a non-empty string");
  }
  if (size_it == params.end()) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": shared_memory_byte_size is required with a region"));
  }
  KJIT_ASSIGN_OR_RETURN(const int64_t size, WireInt("shared_memory_byte_size", size_it->second));
  int64_t offset = 0;
  if (offset_it != params.end()) {
    KJIT_ASSIGN_OR_RETURN(offset, WireInt("shared_memory_offset", offset_it->second));
  }
  if (size < 0 || offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": negative shared memory offset or byte size"));
  }
  t->kind = TensorArg::Kind::kRegion;
  t->region = region_it->second.string_param();
  t->offset = static_cast<uint64_t>(offset);
  t->desc.byte_size = static_cast<uint64_t>(size);
  return absl::OkStatus();
}

template <typename T, typename Repeated>
std::string Pack(const Repeated& values) {
  std::string out(values.size() * sizeof(T), '\0');
  for (int i = 0; i < values.size(); ++i) {
    const T v = static_cast<T>(values.Get(i));
    std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
  }
  return out;
}

bool HasContents(const inference::InferTensorContents& c) {
  return c.bool_contents_size() || c.int_contents_size() || c.int64_contents_size() ||
         c.uint_contents_size() || c.uint64_contents_size() || c.fp32_contents_size() ||
         c.fp64_contents_size() || c.bytes_contents_size();
}

// Typed contents -> raw little-endian bytes of the tensor's datatype. The count of values is checked
// against the shape first, so that no copy is made of contents that do not fit it (a zero varint is
// one byte on the wire and eight in an INT64 copy).
StatusOr<std::string> ContentsBytes(const inference::ModelInferRequest::InferInputTensor& in) {
  const auto& c = in.contents();
  const std::string& dt = in.datatype();
  const std::span<const int64_t> shape(in.shape().data(), static_cast<size_t>(in.shape().size()));
  const auto packed = [&](const auto& values, auto type, const char* field) -> StatusOr<std::string> {
    if (values.size() == 0 && HasContents(c) && kernels::ShapeElements(shape) > 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", ClientText(in.name()), "': datatype ", ClientText(dt),
                                                     " travels in contents.", field,
                                                     "; its values were given in another field"));
    }
    if (kernels::ShapeElements(shape) != static_cast<uint64_t>(values.size())) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", ClientText(in.name()), "': ", values.size(),
                                                     " typed contents values for shape ", kernels::ShapeText(shape),
                                                     " of datatype ", ClientText(dt), "; send one value per element"));
    }
    using T = decltype(type);
    using V = std::decay_t<decltype(values.Get(0))>;
    if constexpr (std::is_same_v<T, uint8_t> && !std::is_same_v<V, bool>) {  // 32-bit values: none cut silently
      for (int i = 0; i < values.size(); ++i) {
        if (values.Get(i) > 0xff) {
          return absl::InvalidArgumentError(absl::StrCat("tensor '", ClientText(in.name()), "': value ",
                                                         values.Get(i), " at element ", i, " does not fit ",
                                                         ClientText(dt), " (0..255)"));
        }
      }
    }
    return Pack<T>(values);
  };
  if (dt == "BOOL") return packed(c.bool_contents(), uint8_t{}, "bool_contents");
  if (dt == "UINT8") return packed(c.uint_contents(), uint8_t{}, "uint_contents");
  if (dt == "INT32") return packed(c.int_contents(), int32_t{}, "int_contents");
  if (dt == "UINT32") return packed(c.uint_contents(), uint32_t{}, "uint_contents");
  if (dt == "INT64") return packed(c.int64_contents(), int64_t{}, "int64_contents");
  if (dt == "FP32") return packed(c.fp32_contents(), float{}, "fp32_contents");
  return absl::InvalidArgumentError(absl::StrCat("tensor '", ClientText(in.name()), "': datatype ", ClientText(dt),
                                                 " cannot travel as typed contents; send it raw"));
}

// Each schema tensor appears at most once, so a request with more tensors than the schema names a
// tensor twice or one the schema lacks; it is refused here, naming that tensor, before any
// per-tensor work. (A request of many thousand empty tensors would otherwise cost time quadratic in
// their number: each output's shape scans the inputs.) Only the first schema-size + 1 names are
// looked at: among them there is such a tensor.
template <class Tensors>
Status CheckCount(const Tensors& tensors, std::span<const kernels::TensorSchema> schema, const char* kind,
                  const std::string& model) {
  if (static_cast<size_t>(tensors.size()) <= schema.size()) return absl::OkStatus();
  std::string known;
  for (const kernels::TensorSchema& t : schema) absl::StrAppend(&known, known.empty() ? "" : ", ", t.name);
  std::vector<bool> seen(schema.size(), false);
  for (size_t i = 0; i <= schema.size(); ++i) {
    const std::string& name = tensors.Get(static_cast<int>(i)).name();
    const int slot = kernels::SchemaIndex(schema, name);
    if (slot < 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", ClientText(name), "': unknown ", kind,
                                                     " of model '", model, "' (expected ", known, ")"));
    }
    if (seen[slot]) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", kind, " given twice"));
    }
    seen[slot] = true;
  }
  return absl::InternalError("more tensors than the schema, yet none repeated or unknown");
}

Status DecodeInputs(const inference::ModelInferRequest& req, DecodedInfer* out) {
  int raw_used = 0;
  out->owned.reserve(req.inputs_size());
  for (const auto& in : req.inputs()) {
    TensorArg t;
    t.desc = {in.name(), in.datatype(), {in.shape().begin(), in.shape().end()}, 0};
    KJIT_RETURN_IF_ERROR(DecodeShm(in.name(), in.parameters(), &t));
    const bool contents = in.has_contents() && HasContents(in.contents());
    if (t.kind == TensorArg::Kind::kRegion) {
      if (contents) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", ClientText(in.name()), "': both a shared memory region and contents"));
      }
    } else if (contents) {
      KJIT_ASSIGN_OR_RETURN(std::string bytes, ContentsBytes(in));
      out->owned.push_back(std::make_unique<std::string>(std::move(bytes)));
      t.host = reinterpret_cast<const uint8_t*>(out->owned.back()->data());
      t.desc.byte_size = out->owned.back()->size();
    } else {
      if (raw_used >= req.raw_input_contents_size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", ClientText(in.name()), "': no data (no region, contents or raw_input_contents slot left)"));
      }
      const std::string& raw = req.raw_input_contents(raw_used++);
      t.host = reinterpret_cast<const uint8_t*>(raw.data());
      t.desc.byte_size = raw.size();
    }
    out->request.inputs.push_back(std::move(t));
  }
  if (raw_used != req.raw_input_contents_size()) {
    return absl::InvalidArgumentError(absl::StrCat(req.raw_input_contents_size(), " raw_input_contents entries for ",
                                                   raw_used, " inputs without region or contents"));
  }
  return absl::OkStatus();
}

// Output shapes follow from the inputs (the family says how); the family's checks then test every
// capacity against them.
Status DecodeOutputs(const inference::ModelInferRequest& req, const kernels::KernelFamily& family,
                     DecodedInfer* out) {
  std::vector<kernels::TensorDesc> inputs;
  for (const TensorArg& t : out->request.inputs) inputs.push_back(t.desc);
  const std::span<const kernels::TensorSchema> schema = family.outputs();
  auto add = [&](const std::string& name, const google::protobuf::Map<std::string, Param>* params) -> Status {
    TensorArg t;
    t.desc.name = name;
    if (const int slot = kernels::SchemaIndex(schema, name); slot >= 0) {
      t.desc.datatype = schema[slot].datatypes.front();
      t.desc.shape = family.OutputShape(slot, inputs);
    }
    if (params != nullptr) KJIT_RETURN_IF_ERROR(DecodeShm(name, *params, &t));
    if (t.kind == TensorArg::Kind::kHost) {
      uint64_t n = kernels::DatatypeSize(t.desc.datatype);
      for (int64_t d : t.desc.shape) n *= static_cast<uint64_t>(d);
      t.desc.byte_size = n;
    }
    out->request.outputs.push_back(std::move(t));
    return absl::OkStatus();
  };
  for (const auto& o : req.outputs()) KJIT_RETURN_IF_ERROR(add(o.name(), &o.parameters()));
  // No outputs requested: the family's required ones, returned inline.
  if (req.outputs_size() == 0) {
    for (const kernels::TensorSchema& s : schema) {
      if (!s.optional) KJIT_RETURN_IF_ERROR(add(s.name, nullptr));
    }
  }
  return absl::OkStatus();
}

}  // namespace

Status DecodeInferRequest(const inference::ModelInferRequest& req, DecodedInfer* out) {
  KJIT_ASSIGN_OR_RETURN(const kernels::KernelFamily* family, kernels::FindFamily(req.model_name()));
  if (!req.model_version().empty() && req.model_version() != kModelVersion) {
    return absl::InvalidArgumentError(absl::StrCat("model '", req.model_name(), "' has no version '",
                                                   ClientText(req.model_version()), "' (only ", kModelVersion, ")"));
  }
  out->request.model = req.model_name();
  out->request.id = req.id();
  for (const auto& [name, p] : req.parameters()) {
    if (kernels::IsReservedParameter(name)) continue;
    KJIT_ASSIGN_OR_RETURN(kernels::ParamValue v, WireValue(name, p));
    out->request.params.push_back({name, std::move(v)});
  }
  KJIT_RETURN_IF_ERROR(CheckCount(req.inputs(), family->inputs(), "input", std::string(family->name())));
  KJIT_RETURN_IF_ERROR(CheckCount(req.outputs(), family->outputs(), "output", std::string(family->name())));
  KJIT_RETURN_IF_ERROR(DecodeInputs(req, out));
  return DecodeOutputs(req, *family, out);
}

void EncodeInferResponse(const inference::ModelInferRequest& req, launch::LaunchResult result,
                         inference::ModelInferResponse* resp) {
  resp->set_model_name(req.model_name());
  resp->set_model_version(kModelVersion);
  resp->set_id(req.id());
  for (size_t i = 0; i < result.outputs.size(); ++i) {
    const kernels::TensorDesc& t = result.outputs[i];
    auto* o = resp->add_outputs();
    o->set_name(t.name);
    o->set_datatype(t.datatype);
    for (int64_t dim : t.shape) o->add_shape(dim);
    std::string* raw = resp->add_raw_output_contents();
    if (i < result.output_bytes.size()) *raw = std::move(result.output_bytes[i]);
  }
}

}  // namespace kjit::server
