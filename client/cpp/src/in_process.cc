#include "client/cpp/src/in_process.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/cpp/src/context_restorer.h"
#include "runtime/kernels/mla_verify/schema.h"
#include "client/cpp/src/local_device.h"
#include "runtime/common/log.h"

namespace kjit::client {
namespace {

// Launches run in the device's primary context (torch's): make it current on this thread when the
// caller left another one current (a ContextRestorer puts the caller's back after).
Status UseContext(const driver::Api* api, CUcontext ctx) {
  CUcontext current = nullptr;
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuCtxGetCurrent(&current), "cuCtxGetCurrent"));
  if (current == ctx) return absl::OkStatus();
  return driver::Check(api->cuCtxSetCurrent(ctx), "cuCtxSetCurrent(the device's primary context)");
}

}  // namespace

StatusOr<const std::vector<kernels::CompiledKernel>*> InProcessLauncher::Cubins(const std::string& arch) {
  auto it = cubins_.find(arch);
  if (it != cubins_.end()) return &it->second;
  KJIT_ASSIGN_OR_RETURN(std::vector<kernels::CompiledKernel> got, source_(arch));
  return &cubins_.emplace(arch, std::move(got)).first->second;
}

Status InProcessLauncher::Prepare(const std::string& arch) {
  std::lock_guard<std::mutex> lock(mu_);
  return Cubins(arch).status();
}

StatusOr<InProcessLauncher::Device*> InProcessLauncher::DeviceFor(int64_t ordinal) {
  if (ordinal >= 0 && ordinal < kFastDevices) {
    if (Device* d = fast_[ordinal].load(std::memory_order_acquire)) return d;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = devices_.find(ordinal); it != devices_.end()) return it->second.get();
  auto d = std::make_unique<Device>();
  KJIT_ASSIGN_OR_RETURN(d->info, LocalDevice(ordinal));
  KJIT_ASSIGN_OR_RETURN(driver::Context ctx, driver::Context::RetainPrimary(static_cast<int>(ordinal)));
  d->context.emplace(std::move(ctx));
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  CUcontext previous = nullptr;
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuCtxGetCurrent(&previous), "cuCtxGetCurrent"));
  KJIT_RETURN_IF_ERROR(d->context->MakeCurrent());
  Status loaded = [&]() -> Status {
    KJIT_ASSIGN_OR_RETURN(const std::vector<kernels::CompiledKernel>* cubins, Cubins(d->info.arch));
    KJIT_ASSIGN_OR_RETURN(d->kernels, kernels::LoadedKernels::Load(*cubins, d->info));
    KJIT_ASSIGN_OR_RETURN(driver::DeviceBuffer word, driver::DeviceBuffer::Alloc(sizeof(uint32_t)));
    KJIT_RETURN_IF_ERROR(word.Fill(0));
    d->accumulated.emplace(std::move(word));
    return absl::OkStatus();
  }();
  if (previous != nullptr && previous != d->context->get()) (void)api->cuCtxSetCurrent(previous);
  if (!loaded.ok()) return WithContext(loaded, absl::StrCat("loading ", std::string(family_->name()), " on GPU ", ordinal));
  Log(LogLevel::kInfo, absl::StrCat(std::string(family_->name()), ": kernels loaded on GPU ", ordinal, " (", d->info.name, ", ",
                                    d->info.arch, ")"));
  Device* raw = d.get();
  devices_.emplace(ordinal, std::move(d));
  if (ordinal >= 0 && ordinal < kFastDevices) fast_[ordinal].store(raw, std::memory_order_release);
  return raw;
}

kjit_mla_verify_args InProcessLauncher::LayoutOf(const kjit_mla_verify_args& a) {
  kjit_mla_verify_args l = a;
  // Whether v_extend is k_extend's own rows decides whether it is checked: part of the layout.
  const bool v_is_k = ViewOfKExtend(a.v_extend, a.k_extend);
  for (kjit_tensor* t : {&l.q, &l.k_extend, &l.v_extend, &l.kv_cache, &l.qo_indptr, &l.kv_indptr, &l.kv_indices,
                         &l.custom_mask, &l.packed_mask, &l.mask_indptr, &l.o, &l.lse}) {
    t->data = t->data != 0 ? 1 : 0;  // present or not, never where
  }
  if (v_is_k) l.v_extend.data = 2;
  l.workspace = l.workspace_bytes = 0;
  return l;
}

StatusOr<InProcessLauncher::Planned> InProcessLauncher::Check(const kjit_mla_verify_args& args) {
  KJIT_ASSIGN_OR_RETURN(const VerifyCall call, DescribeVerify(args));
  KJIT_ASSIGN_OR_RETURN(kernels::TypedParams params, kernels::ConvertParams(family_->params(), call.params));
  Planned p;
  KJIT_ASSIGN_OR_RETURN(p.launch, family_->Check(call.inputs, call.outputs, params));
  KJIT_ASSIGN_OR_RETURN(p.device, DeviceFor(args.device));
  // The index pointers stay on the GPU: the kernels check them against the validated sizes.
  p.launch->AssumeBounds();
  KJIT_ASSIGN_OR_RETURN(p.needs, p.launch->Plan(p.device->info));
  p.layout = LayoutOf(args);
  return p;
}

Status InProcessLauncher::Launch(const kjit_mla_verify_args& args, CUstream stream, uint64_t* needed) {
  *needed = 0;
  if (args.struct_size != sizeof(kjit_mla_verify_args)) return DescribeVerify(args).status();
  std::lock_guard<std::mutex> lock(last_mu_);
  const kjit_mla_verify_args layout = LayoutOf(args);
  if (last_.launch == nullptr || std::memcmp(&layout, &last_.layout, sizeof(layout)) != 0) {
    last_.launch.reset();
    KJIT_ASSIGN_OR_RETURN(last_, Check(args));
  }
  const Planned& p = last_;
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  const ContextRestorer restore(api);
  KJIT_RETURN_IF_ERROR(UseContext(api, p.device->context->get()));
  if (args.workspace_bytes < p.needs.workspace_bytes || args.workspace == 0) {
    *needed = p.needs.workspace_bytes;
    return absl::ResourceExhaustedError(absl::StrCat("the launch needs a workspace of ", p.needs.workspace_bytes,
                                                     " bytes on GPU ", args.device, "; ", args.workspace_bytes,
                                                     " given"));
  }
  // Addresses by schema position, in DescribeVerify's order of the tensors it describes.
  const uint64_t by_input[kernels::kNumMlaVerifyInputs] = {
      args.q.data, args.k_extend.data, args.kv_cache.data, args.qo_indptr.data, args.kv_indptr.data,
      args.kv_indices.data, args.custom_mask.data, args.packed_mask.data, args.mask_indptr.data,
      layout.v_extend.data == 1 ? args.v_extend.data : 0};
  kernels::LaunchAddresses a;
  a.inputs.assign(by_input, by_input + kernels::kNumMlaVerifyInputs);
  a.outputs = {args.o.data, args.lse.data};
  a.workspace = args.workspace;
  a.accumulated_error_word = p.device->accumulated->get();
  return p.launch->Enqueue(*p.device->kernels, a, stream);
}

Status InProcessLauncher::CheckErrors(int64_t device, CUstream stream) {
  KJIT_ASSIGN_OR_RETURN(Device * d, DeviceFor(device));
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  const ContextRestorer restore(api);
  KJIT_RETURN_IF_ERROR(UseContext(api, d->context->get()));
  if (stream != nullptr) {
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamSynchronize(stream), "cuStreamSynchronize"));
  } else {
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuCtxSynchronize(), "cuCtxSynchronize"));
  }
  uint32_t bits = 0;
  KJIT_RETURN_IF_ERROR(d->accumulated->CopyToHost(&bits, sizeof(bits)));
  if (bits == 0) return absl::OkStatus();
  KJIT_RETURN_IF_ERROR(d->accumulated->Fill(0));
  return family_->ErrorStatus(bits);
}

}  // namespace kjit::client
