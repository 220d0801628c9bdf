#include "runtime/server/infer_request.h"

#include <cstring>
#include <limits>

#include "absl/strings/numbers.h"
#include "runtime/driver/cuda_driver.h"

namespace kjit::server {
namespace {

using Param = inference::InferParameter;

StatusOr<double> AsDouble(const std::string& name, const Param& p) {
  switch (p.parameter_choice_case()) {
    case Param::kDoubleParam: return p.double_param();
    case Param::kInt64Param: return static_cast<double>(p.int64_param());
    case Param::kUint64Param: return static_cast<double>(p.uint64_param());
    case Param::kStringParam: {
      double v = 0;
      if (absl::SimpleAtod(p.string_param(), &v)) return v;
      break;
    }
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' must be a number"));
}

StatusOr<bool> AsBool(const std::string& name, const Param& p) {
  switch (p.parameter_choice_case()) {
    case Param::kBoolParam: return p.bool_param();
    case Param::kInt64Param: return p.int64_param() != 0;
    case Param::kStringParam: {
      bool v = false;
      if (absl::SimpleAtob(p.string_param(), &v)) return v;
      break;
    }
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' must be a bool"));
}

StatusOr<int64_t> AsInt(const std::string& name, const Param& p) {
  if (p.parameter_choice_case() == Param::kInt64Param) return p.int64_param();
  if (p.parameter_choice_case() == Param::kUint64Param &&
      p.uint64_param() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(p.uint64_param());
  }
  return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' must be an int64"));
}

StatusOr<std::string> AsString(const std::string& name, const Param& p) {
  if (p.parameter_choice_case() == Param::kStringParam && !p.string_param().empty()) {
    return p.string_param();
  }
  return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' must be a non-empty string"));
}

Status ParseRequestParams(const inference::ModelInferRequest& req, ParsedInfer* out) {
  for (const auto& [name, p] : req.parameters()) {
    if (IsReservedParameter(name)) continue;
    if (name == "sm_scale") {
      KJIT_ASSIGN_OR_RETURN(out->scalars.sm_scale, AsDouble(name, p));
    } else if (name == "k_scale") {
      KJIT_ASSIGN_OR_RETURN(out->scalars.k_scale, AsDouble(name, p));
    } else if (name == "v_scale") {
      KJIT_ASSIGN_OR_RETURN(out->scalars.v_scale, AsDouble(name, p));
    } else if (name == "is_causal") {
      KJIT_ASSIGN_OR_RETURN(out->scalars.is_causal, AsBool(name, p));
    } else if (name == "kjit_device") {
      KJIT_ASSIGN_OR_RETURN(out->device, AsInt(name, p));
    } else if (name == "kjit_wait_event") {
      KJIT_ASSIGN_OR_RETURN(out->wait_event, AsString(name, p));
    } else if (name == "kjit_signal_event") {
      KJIT_ASSIGN_OR_RETURN(out->signal_event, AsString(name, p));
    } else if (name == "kjit_max_draft") {
      KJIT_ASSIGN_OR_RETURN(out->max_draft_hint, AsInt(name, p));
      if (out->max_draft_hint < 1 || out->max_draft_hint > kernels::kMlaMaxDraft) {
        return absl::InvalidArgumentError(absl::StrCat("parameter 'kjit_max_draft' is ", out->max_draft_hint,
                                                       "; must be 1..", kernels::kMlaMaxDraft));
      }
    } else if (name == "kjit_max_prefix") {
      KJIT_ASSIGN_OR_RETURN(out->max_prefix_hint, AsInt(name, p));
      if (out->max_prefix_hint < 0) {
        return absl::InvalidArgumentError(absl::StrCat("parameter 'kjit_max_prefix' is ", out->max_prefix_hint,
                                                       "; must be >= 0"));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown request parameter '", name,
          "' (known: sm_scale, k_scale, v_scale, is_causal, kjit_device, kjit_wait_event, "
          "kjit_signal_event, kjit_max_draft, kjit_max_prefix)"));
    }
  }
  return absl::OkStatus();
}

// shared_memory_* parameters of one tensor: fills a region source, or leaves kind kInline.
Status ParseShm(Daemon* d, const std::string& tensor,
                const google::protobuf::Map<std::string, Param>& params, TensorSource* src) {
  auto region_it = params.find("shared_memory_region");
  auto size_it = params.find("shared_memory_byte_size");
  auto offset_it = params.find("shared_memory_offset");
  if (region_it == params.end()) {
    if (size_it != params.end() || offset_it != params.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", tensor, "': shared_memory_byte_size/offset given without shared_memory_region"));
    }
    return absl::OkStatus();
  }
  auto where = [&tensor] { return absl::StrCat("tensor '", tensor, "'"); };  // built on errors only
  KJIT_ASSIGN_OR_RETURN(std::string name, AsString("shared_memory_region", region_it->second));
  if (size_it == params.end()) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": shared_memory_byte_size is required with a region"));
  }
  KJIT_ASSIGN_OR_RETURN(int64_t size, AsInt("shared_memory_byte_size", size_it->second));
  int64_t offset = 0;
  if (offset_it != params.end()) {
    KJIT_ASSIGN_OR_RETURN(offset, AsInt("shared_memory_offset", offset_it->second));
  }
  if (size < 0 || offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": negative shared memory offset or byte size"));
  }
  auto region = d->regions.FindRegion(name);
  if (!region.ok()) return WithContext(region.status(), where());
  const uint64_t cap = (*region)->size(), off = static_cast<uint64_t>(offset),
                 n = static_cast<uint64_t>(size);
  if (!driver::RangeInside(off, n, cap)) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": offset ", off, " + byte size ", n,
                                                   " is outside region '", name, "' (", cap, " bytes)"));
  }
  src->kind = (*region)->kind() == ipc::RegionKind::kCuda ? TensorSource::Kind::kCuda
                                                          : TensorSource::Kind::kSystem;
  src->region = *std::move(region);
  src->offset = off;
  src->byte_size = n;
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

// Typed contents -> raw little-endian bytes of the tensor's datatype.
StatusOr<std::string> ContentsBytes(const inference::ModelInferRequest::InferInputTensor& in) {
  const auto& c = in.contents();
  const std::string& dt = in.datatype();
  if (dt == "BOOL") return Pack<uint8_t>(c.bool_contents());
  if (dt == "UINT8") return Pack<uint8_t>(c.uint_contents());
  if (dt == "INT32") return Pack<int32_t>(c.int_contents());
  if (dt == "UINT32") return Pack<uint32_t>(c.uint_contents());
  if (dt == "INT64") return Pack<int64_t>(c.int64_contents());
  if (dt == "FP32") return Pack<float>(c.fp32_contents());
  return absl::InvalidArgumentError(absl::StrCat("tensor '", in.name(), "': datatype ", dt,
                                                 " cannot travel as typed contents; send it raw"));
}

bool HasContents(const inference::InferTensorContents& c) {
  return c.bool_contents_size() || c.int_contents_size() || c.int64_contents_size() ||
         c.uint_contents_size() || c.uint64_contents_size() || c.fp32_contents_size() ||
         c.fp64_contents_size() || c.bytes_contents_size();
}

uint64_t Elements(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

}  // namespace

bool IsReservedParameter(const std::string& name) {
  return name.rfind("sequence_", 0) == 0 || name.rfind("triton_", 0) == 0 || name == "priority" ||
         name == "timeout" || name == "headers" || name == "binary_data_output";
}

StatusOr<ParsedInfer> ParseInferRequest(Daemon* d, const inference::ModelInferRequest& req) {
  ParsedInfer p;
  KJIT_ASSIGN_OR_RETURN(p.model, FindModel(req.model_name(), req.model_version()));
  KJIT_RETURN_IF_ERROR(ParseRequestParams(req, &p));

  int raw_used = 0;
  p.input_src.resize(req.inputs_size());
  for (int i = 0; i < req.inputs_size(); ++i) {
    const auto& in = req.inputs(i);
    TensorSource& src = p.input_src[i];
    KJIT_RETURN_IF_ERROR(ParseShm(d, in.name(), in.parameters(), &src));
    const bool contents = in.has_contents() && HasContents(in.contents());
    if (src.kind != TensorSource::Kind::kInline) {
      if (contents) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", in.name(), "': both a shared memory region and contents"));
      }
    } else if (contents) {
      KJIT_ASSIGN_OR_RETURN(src.owned, ContentsBytes(in));
      src.host = reinterpret_cast<const uint8_t*>(src.owned.data());
      src.byte_size = src.owned.size();
    } else {
      if (raw_used >= req.raw_input_contents_size()) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", in.name(),
                                                       "': no data (no region, contents or raw_input_contents slot left)"));
      }
      const std::string& raw = req.raw_input_contents(raw_used++);
      src.host = reinterpret_cast<const uint8_t*>(raw.data());
      src.byte_size = raw.size();
    }
    p.inputs.push_back({in.name(), in.datatype(), {in.shape().begin(), in.shape().end()}, src.byte_size});
  }
  if (raw_used != req.raw_input_contents_size()) {
    return absl::InvalidArgumentError(absl::StrCat(req.raw_input_contents_size(),
                                                   " raw_input_contents entries for ", raw_used,
                                                   " inputs without region or contents"));
  }

  // Output shapes follow from q; the schema then checks every capacity against them.
  std::vector<int64_t> nh = {0, 0};
  for (const auto& t : p.inputs) {
    if (t.name == "q" && t.shape.size() == 3 && t.shape[0] >= 0 && t.shape[1] >= 0) {
      nh = {t.shape[0], t.shape[1]};
    }
  }
  std::vector<const inference::ModelInferRequest::InferRequestedOutputTensor*> outs;
  inference::ModelInferRequest::InferRequestedOutputTensor default_o;
  default_o.set_name("o");
  for (const auto& o : req.outputs()) outs.push_back(&o);
  if (outs.empty()) outs.push_back(&default_o);  // no request: the required output only
  p.output_src.resize(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    const auto& o = *outs[i];
    TensorSource& src = p.output_src[i];
    KJIT_RETURN_IF_ERROR(ParseShm(d, o.name(), o.parameters(), &src));
    kernels::TensorDesc t{o.name(), o.name() == "lse" ? "FP32" : "BF16",
                          o.name() == "lse" ? nh : std::vector<int64_t>{nh[0], nh[1], kernels::kMlaVDim}, 0};
    if (src.kind == TensorSource::Kind::kInline) {
      src.byte_size = Elements(t.shape) * kernels::DatatypeSize(t.datatype);
    }
    t.byte_size = src.byte_size;
    p.outputs.push_back(std::move(t));
  }
  KJIT_ASSIGN_OR_RETURN(p.problem, kernels::CheckMlaVerifyShapes(p.inputs, p.outputs, p.scalars, &p.layout));
  if (!p.signal_event.empty()) {
    for (const auto& src : p.output_src) {
      if (src.kind != TensorSource::Kind::kCuda) {
        return absl::InvalidArgumentError(
            "kjit_signal_event (asynchronous launch) needs every output in a CUDA region");
      }
    }
  }
  return p;
}

}  // namespace kjit::server
