#include "client/cpp/src/in_process.h"

#include "absl/strings/str_cat.h"
#include "runtime/common/log.h"

namespace kjit::client {
namespace {

// Launches run in the device's primary context (torch's): make it current on this thread when the
// caller left another one current.
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
  KJIT_ASSIGN_OR_RETURN(std::vector<driver::DeviceInfo> all, driver::Devices());
  if (ordinal < 0 || ordinal >= static_cast<int64_t>(all.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", ordinal, " out of range (this process sees ", all.size(), " GPUs)"));
  }
  auto d = std::make_unique<Device>();
  d->info = all[ordinal];
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

Status InProcessLauncher::Launch(const VerifyCall& call, int64_t device, CUdeviceptr workspace,
                                 uint64_t workspace_bytes, CUstream stream, uint64_t* needed) {
  *needed = 0;
  KJIT_ASSIGN_OR_RETURN(kernels::TypedParams params, kernels::ConvertParams(family_->params(), call.params));
  KJIT_ASSIGN_OR_RETURN(std::unique_ptr<kernels::FamilyLaunch> launch,
                        family_->Check(call.inputs, call.outputs, params));
  KJIT_ASSIGN_OR_RETURN(Device * d, DeviceFor(device));
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  KJIT_RETURN_IF_ERROR(UseContext(api, d->context->get()));
  // The index pointers stay on the GPU: the kernels check them against the validated sizes.
  launch->AssumeBounds();
  KJIT_ASSIGN_OR_RETURN(const kernels::LaunchNeeds needs, launch->Plan(d->info));
  if (workspace_bytes < needs.workspace_bytes || workspace == 0) {
    *needed = needs.workspace_bytes;
    return absl::ResourceExhaustedError(absl::StrCat("the launch needs a workspace of ", needs.workspace_bytes,
                                                     " bytes on GPU ", device, "; ", workspace_bytes, " given"));
  }
  kernels::LaunchAddresses a;
  for (int i : launch->input_slots()) a.inputs.push_back(i < 0 ? 0 : call.input_data[i]);
  for (int i : launch->output_slots()) a.outputs.push_back(i < 0 ? 0 : call.output_data[i]);
  a.workspace = workspace;
  a.accumulated_error_word = d->accumulated->get();
  return launch->Enqueue(*d->kernels, a, stream);
}

Status InProcessLauncher::CheckErrors(int64_t device, CUstream stream) {
  KJIT_ASSIGN_OR_RETURN(Device * d, DeviceFor(device));
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
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
