#include "tests/e2e/gpu_client.h"

#include <cstring>

#include "runtime/kernels/registry.h"
#include "runtime/kernels/mla_verify/launch.h"
#include "runtime/kernels/mla_verify_naive/naive.h"
#include "runtime/kernels/mla_verify/plan.h"
#include "tests/e2e/channel.h"
#include "tests/e2e/infer_requests.h"

namespace kjit::e2e {
namespace {

constexpr size_t kAlign = 256;

template <typename T>
size_t Bytes(const std::vector<T>& v) { return v.size() * sizeof(T); }

}  // namespace

StatusOr<std::unique_ptr<CudaArena>> CudaArena::Create(size_t bytes) {
  KJIT_ASSIGN_OR_RETURN(driver::DeviceBuffer b, driver::DeviceBuffer::Alloc(bytes));
  return std::unique_ptr<CudaArena>(new CudaArena(std::move(b)));
}

StatusOr<uint64_t> CudaArena::Reserve(size_t bytes) {
  const size_t need = (std::max<size_t>(bytes, 1) + kAlign - 1) & ~(kAlign - 1);
  if (need > buf_.size() - used_) {
    return absl::ResourceExhaustedError(absl::StrCat("arena of ", buf_.size(), " bytes is full"));
  }
  const uint64_t off = used_;
  used_ += need;
  return off;
}

StatusOr<std::string> CudaArena::IpcHandle() const {
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  CUipcMemHandle h;
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuIpcGetMemHandle(&h, buf_.get()), "cuIpcGetMemHandle"));
  static_assert(sizeof(h) == 64);
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h));
}

StatusOr<CaseLayout> UploadCase(const reference::MlaCase& c, CudaArena* in, CudaArena* out) {
  const auto& p = c.problem;
  const int64_t n = p.num_q, h = p.num_heads, b = p.batch;
  if (c.q.size() != static_cast<size_t>(n * h * kernels::kMlaKDim)) {
    return absl::InvalidArgumentError("a strided q cannot be described over the protocol");
  }
  CaseLayout l;
  const bool packed = p.mask_kind == kernels::MaskKind::kPacked;
  auto add = [&](const char* name, const char* dt, std::vector<int64_t> shape, const void* host, size_t bytes) {
    l.inputs.push_back({name, dt, std::move(shape), bytes});
    l.input_host.push_back(host);
  };
  add("q", "BF16", {n, h, kernels::kMlaKDim}, c.q.data(), Bytes(c.q));
  add("k_extend", "BF16", {n, 1, kernels::kMlaKDim}, c.k_extend.data(), Bytes(c.k_extend));
  add("kv_cache", "BF16", {static_cast<int64_t>(c.kv_cache.size() / kernels::kMlaKDim), 1, kernels::kMlaKDim},
      c.kv_cache.data(), Bytes(c.kv_cache));
  add("qo_indptr", "INT32", {b + 1}, c.qo_indptr.data(), Bytes(c.qo_indptr));
  add("kv_indptr", "INT32", {b + 1}, c.kv_indptr.data(), Bytes(c.kv_indptr));
  add("kv_indices", "INT64", {static_cast<int64_t>(c.kv_indices.size())}, c.kv_indices.data(), Bytes(c.kv_indices));
  if (packed) {
    add("packed_mask", "UINT32", {static_cast<int64_t>(c.mask_packed.size())}, c.mask_packed.data(),
        Bytes(c.mask_packed));
  } else {
    add("custom_mask", "BOOL", {static_cast<int64_t>(c.mask_bool.size())}, c.mask_bool.data(), Bytes(c.mask_bool));
    add("mask_indptr", "INT64", {b + 1}, c.mask_indptr.data(), Bytes(c.mask_indptr));
  }
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  for (size_t i = 0; i < l.inputs.size(); ++i) {
    KJIT_ASSIGN_OR_RETURN(uint64_t off, in->Reserve(l.inputs[i].byte_size));
    l.input_offsets.push_back(off);
    if (l.inputs[i].byte_size == 0) continue;
    KJIT_RETURN_IF_ERROR(driver::Check(
        api->cuMemcpyHtoD(in->base() + off, l.input_host[i], l.inputs[i].byte_size), "upload"));
  }
  l.o_bytes = static_cast<size_t>(n * h * kernels::kMlaVDim * 2);
  l.lse_bytes = static_cast<size_t>(n * h * 4);
  KJIT_ASSIGN_OR_RETURN(l.o_offset, out->Reserve(l.o_bytes));
  KJIT_ASSIGN_OR_RETURN(l.lse_offset, out->Reserve(l.lse_bytes));
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuCtxSynchronize(), "upload sync"));

  std::vector<kernels::TensorDesc> outs = {{"o", "BF16", {n, h, kernels::kMlaVDim}, l.o_bytes}};
  if (p.write_lse) outs.push_back({"lse", "FP32", {n, h}, l.lse_bytes});
  kernels::MlaVerifyScalars s;
  s.sm_scale = p.sm_scale;
  s.k_scale = p.k_scale;
  s.v_scale = p.v_scale;
  s.is_causal = p.is_causal;
  kernels::MlaVerifyLayout layout;
  KJIT_ASSIGN_OR_RETURN(l.problem, kernels::CheckMlaVerifyShapes(l.inputs, outs, s, &layout));
  KJIT_RETURN_IF_ERROR(kernels::CheckMlaVerifyIndptrs(c.qo_indptr, c.kv_indptr,
                                                      packed ? std::span<const int64_t>() : c.mask_indptr,
                                                      &l.problem));
  return l;
}

inference::ModelInferRequest InferRequest(const std::string& model, const reference::MlaCase& c,
                                          const CaseLayout& l, const std::string& in_region,
                                          const std::string& out_region, int device, bool inline_small) {
  inference::ModelInferRequest r;
  r.set_model_name(model);
  auto& params = *r.mutable_parameters();
  params["sm_scale"].set_double_param(c.problem.sm_scale);
  params["k_scale"].set_double_param(c.problem.k_scale);
  params["v_scale"].set_double_param(c.problem.v_scale);
  params["is_causal"].set_bool_param(c.problem.is_causal);
  params["kjit_device"].set_int64_param(device);
  for (size_t i = 0; i < l.inputs.size(); ++i) {
    const auto& t = l.inputs[i];
    auto* in = r.add_inputs();
    in->set_name(t.name);
    in->set_datatype(t.datatype);
    for (int64_t d : t.shape) in->add_shape(d);
    if (inline_small && i >= 3) {
      r.add_raw_input_contents(std::string(static_cast<const char*>(l.input_host[i]), t.byte_size));
    } else {
      testing::SetRegion(in->mutable_parameters(), in_region, l.input_offsets[i], t.byte_size);
    }
  }
  auto* o = r.add_outputs();
  o->set_name("o");
  if (!inline_small) testing::SetRegion(o->mutable_parameters(), out_region, l.o_offset, l.o_bytes);
  if (c.problem.write_lse) {
    auto* lse = r.add_outputs();
    lse->set_name("lse");
    if (!inline_small) testing::SetRegion(lse->mutable_parameters(), out_region, l.lse_offset, l.lse_bytes);
  }
  return r;
}

StatusOr<std::unique_ptr<kernels::LoadedKernels>> LoadKernelsFromDaemon(
    kjit::v1::KernelService::Stub* stub, const driver::DeviceInfo& device) {
  std::vector<kernels::CompiledKernel> all;
  for (std::string_view family : {kernels::kMlaVerifyFamily, kernels::kMlaVerifyNaiveFamily}) {
    for (const auto& spec : kernels::FamilySpecializations(family)) {
      grpc::ClientContext ctx;
      kjit::v1::GetKernelRequest req;
      req.set_family(spec.family);
      req.set_specialization(spec.name);
      req.set_arch(device.arch);
      kjit::v1::GetKernelResponse resp;
      const grpc::Status s = stub->GetKernel(&ctx, req, &resp);
      if (!s.ok()) {
        return absl::InternalError(absl::StrCat("GetKernel ", spec.family, "/", spec.name, ": ", s.error_message()));
      }
      kernels::CompiledKernel k;
      k.spec = spec;
      k.arch = device.arch;
      k.cubin_arch = resp.arch();  // the daemon's answer: sm_90a for mla_verify on sm_90
      k.cache_key = resp.cache_key();
      k.cubin.assign(resp.cubin().begin(), resp.cubin().end());
      for (const auto& kr : resp.kernels()) k.lowered_names.emplace_back(kr.name_expression(), kr.lowered_name());
      all.push_back(std::move(k));
    }
  }
  return kernels::LoadedKernels::Load(all, device);
}

kernels::MlaVerifyBuffers InputBuffers(const CaseLayout& l, CUdeviceptr in_base) {
  auto at = [&](const char* name) -> CUdeviceptr {
    for (size_t i = 0; i < l.inputs.size(); ++i) {
      if (l.inputs[i].name == name) return in_base + l.input_offsets[i];
    }
    return 0;
  };
  kernels::MlaVerifyBuffers b;
  b.q = at("q"), b.k_extend = at("k_extend"), b.kv_cache = at("kv_cache");
  b.qo_indptr = at("qo_indptr"), b.kv_indptr = at("kv_indptr"), b.kv_indices = at("kv_indices");
  b.mask = l.problem.mask_kind == kernels::MaskKind::kPacked ? at("packed_mask") : at("custom_mask");
  b.mask_indptr = at("mask_indptr");
  return b;
}

StatusOr<InProcessResult> RunInProcess(const std::string& family, const kernels::KernelTable& table,
                                       const driver::DeviceInfo& device, const CaseLayout& l,
                                       CUdeviceptr in_base, CUstream stream) {
  const bool fast = family == kernels::kMlaVerifyFamily;
  KJIT_ASSIGN_OR_RETURN(kernels::MlaVerifyPlan plan, fast ? kernels::PlanMlaVerify(l.problem, device)
                                                          : kernels::PlanMlaVerifyNaive(l.problem, device));
  KJIT_ASSIGN_OR_RETURN(driver::DeviceBuffer o, driver::DeviceBuffer::Alloc(l.o_bytes));
  KJIT_ASSIGN_OR_RETURN(driver::DeviceBuffer lse, driver::DeviceBuffer::Alloc(l.lse_bytes));
  KJIT_ASSIGN_OR_RETURN(driver::DeviceBuffer ws, driver::DeviceBuffer::Alloc(
                                                     std::max(plan.workspace_bytes, plan.error_word_offset + 4)));
  KJIT_RETURN_IF_ERROR(o.Fill(0xFF));
  KJIT_RETURN_IF_ERROR(lse.Fill(0xFF));
  KJIT_RETURN_IF_ERROR(ws.Fill(0xAB));
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuCtxSynchronize(), "poison sync"));
  kernels::MlaVerifyBuffers b = InputBuffers(l, in_base);
  b.o = o.get();
  b.lse = l.problem.write_lse ? lse.get() : 0;
  b.workspace = ws.get();
  KJIT_RETURN_IF_ERROR(fast ? kernels::LaunchMlaVerify(table, plan, l.problem, b, stream)
                            : kernels::LaunchMlaVerifyNaive(table, plan, l.problem, b, stream));
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamSynchronize(stream), "in-process launch"));
  uint32_t err = 0;
  KJIT_RETURN_IF_ERROR(ws.CopyToHost(&err, sizeof(err), plan.error_word_offset));
  if (err != 0) return absl::InternalError(absl::StrCat("in-process error word 0x", absl::Hex(err)));
  InProcessResult r;
  r.o.resize(l.o_bytes / 2);
  KJIT_RETURN_IF_ERROR(o.CopyToHost(r.o.data(), l.o_bytes));
  if (l.problem.write_lse) {
    r.lse.resize(l.lse_bytes / 4);
    KJIT_RETURN_IF_ERROR(lse.CopyToHost(r.lse.data(), l.lse_bytes));
  }
  return r;
}

std::shared_ptr<grpc::Channel> Connect(const std::string& target) { return kjit::testing::DaemonChannel(target); }

}  // namespace kjit::e2e
