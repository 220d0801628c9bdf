#include "runtime/server/infer_launch.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "runtime/ipc/sigbus_guard.h"
#include "runtime/server/family_dispatch.h"

namespace kjit::server {
namespace {

using Kind = TensorSource::Kind;
constexpr size_t kAlign = 256;
// Every staged tensor gets its own nonzero address, empty ones included.
size_t AlignUp(size_t x) { return (std::max<size_t>(x, 1) + kAlign - 1) & ~(kAlign - 1); }

const uint8_t* HostPtr(const TensorSource& s) {
  if (s.kind != Kind::kInline) return s.region->system->data() + s.offset;
  // `owned` may have moved with its TensorSource (a short string's bytes move with it).
  return s.owned.empty() ? s.host : reinterpret_cast<const uint8_t*>(s.owned.data());
}

uint64_t NeededBytes(const kernels::TensorDesc& t) {
  uint64_t n = kernels::DatatypeSize(t.datatype);
  for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::string SourceName(const std::string& tensor, const TensorSource& s) {
  return absl::StrCat("tensor '", tensor, "' (region '", s.region ? s.region->name : "", "')");
}

// Inline or system-memory bytes (device-resident ones arrive as `cuda_copy`, read back already).
StatusOr<std::vector<uint8_t>> ReadToHost(const std::string& tensor, const TensorSource& s,
                                          uint64_t bytes, const uint8_t* cuda_copy) {
  std::vector<uint8_t> out(bytes);
  if (bytes == 0) return out;
  if (s.kind == Kind::kSystem) {
    KJIT_RETURN_IF_ERROR(ipc::GuardedCopy(out.data(), HostPtr(s), bytes, SourceName(tensor, s).c_str()));
    return out;
  }
  const uint8_t* from = s.kind == Kind::kInline ? HostPtr(s) : cuda_copy;
  if (from == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("tensor '", tensor, "': device-resident index pointers were not read back"));
  }
  std::memcpy(out.data(), from, bytes);
  return out;
}

template <typename T>
std::vector<T> As(const std::vector<uint8_t>& bytes) {
  std::vector<T> v(bytes.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

// What the kernels' error word says, as the status the launch returns.
Status KernelErrors(uint32_t err, int64_t num_slots) {
  if (err & kernels::kMlaErrKvIndexOutOfRange) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor 'kv_indices': kv_indices entry >= S (", num_slots,
        " kv_cache rows); those slots were treated as masked and the output is not valid"));
  }
  if (err != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the kernel reported error bits 0x", absl::Hex(err),
        ": an index pointer (qo_indptr, kv_indptr or mask_indptr) leaves its tensors or gives a request "
        "more than max_draft (kjit_max_draft) draft tokens; those requests were skipped and the output "
        "is not valid"));
  }
  return absl::OkStatus();
}

}  // namespace

Status CheckIndptrs(ParsedInfer* p, const IndptrCopies& cuda_copies) {
  auto read = [&](int k) -> StatusOr<std::vector<uint8_t>> {
    const int idx = p->layout.input_slot[kIndptrSlots[k]];
    if (idx < 0) return std::vector<uint8_t>();
    return ReadToHost(p->inputs[idx].name, p->input_src[idx], p->inputs[idx].byte_size, cuda_copies[k]);
  };
  KJIT_ASSIGN_OR_RETURN(auto qo, read(0));
  KJIT_ASSIGN_OR_RETURN(auto kv, read(1));
  KJIT_ASSIGN_OR_RETURN(auto mask, read(2));
  const auto qo32 = As<int32_t>(qo), kv32 = As<int32_t>(kv);
  const auto mask64 = As<int64_t>(mask);
  KJIT_RETURN_IF_ERROR(kernels::CheckMlaVerifyIndptrs(qo32, kv32, mask64, &p->problem));
  // The launch stages these exact bytes: a client that rewrites its shared memory or device buffer
  // between this check and the launch cannot hand the kernels index pointers that were not checked.
  const std::vector<uint8_t>* copies[] = {&qo, &kv, &mask};
  for (int k = 0; k < 3; ++k) {
    const int idx = p->layout.input_slot[kIndptrSlots[k]];
    if (idx < 0) continue;
    TensorSource& src = p->input_src[idx];
    src.kind = Kind::kInline;
    src.owned.assign(copies[k]->begin(), copies[k]->end());
    src.host = reinterpret_cast<const uint8_t*>(src.owned.data());
    src.region.reset();
    src.offset = 0;
  }
  return absl::OkStatus();
}

void PlanUnchecked(ParsedInfer* p) {
  kernels::MlaVerifyProblem& pr = p->problem;
  pr.max_draft = p->max_draft_hint > 0
                     ? static_cast<int>(p->max_draft_hint)
                     : static_cast<int>(std::clamp<int64_t>(pr.num_q, 1, kernels::kMlaMaxDraft));
  pr.max_prefix = p->max_prefix_hint >= 0 ? p->max_prefix_hint : pr.num_kv_indices;
}

bool HasCudaIndptr(const ParsedInfer& p) {
  for (int slot : kIndptrSlots) {
    const int i = p.layout.input_slot[slot];
    if (i >= 0 && p.input_src[i].kind == Kind::kCuda) return true;
  }
  return false;
}

Status RunInfer(Daemon* d, DeviceRuntime* dev, ParsedInfer* p, inference::ModelInferResponse* resp,
                uint64_t* compute_ns) {
  *compute_ns = 0;
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  KJIT_ASSIGN_OR_RETURN(MlaVerifyFamily family, FindMlaVerifyFamily(p->model->name));
  std::shared_ptr<const ipc::NamedEvent> wait_ev, signal_ev;
  if (!p->wait_event.empty()) {
    KJIT_ASSIGN_OR_RETURN(wait_ev, d->regions.FindEvent(p->wait_event));
  }
  if (!p->signal_event.empty()) {
    KJIT_ASSIGN_OR_RETURN(signal_ev, d->regions.FindEvent(p->signal_event));
  }
  for (const auto& ev : {wait_ev, signal_ev}) {
    if (ev && ev->event->device() != dev->info().ordinal) {
      return absl::InvalidArgumentError(absl::StrCat("event '", ev->name, "' belongs to GPU ",
                                                     ev->event->device(), ", the launch runs on GPU ",
                                                     dev->info().ordinal));
    }
  }

  std::lock_guard<std::mutex> lock(dev->mu());
  KJIT_RETURN_IF_ERROR(dev->context().MakeCurrent());
  dev->Reap();
  if (dev->kernels() == nullptr) return absl::FailedPreconditionError("kernels not loaded on this GPU");
  // An earlier asynchronous launch's kernel errors are known only once it has run: they fail the
  // next launch on this GPU that names one of its events.
  for (const auto& ev : {wait_ev, signal_ev}) {
    if (!ev) continue;
    const std::string failure = dev->TakeAsyncFailure(ev->name, ev);
    if (!failure.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "not run: an earlier ", failure, " (reported to the next launch that names event '", ev->name, "')"));
    }
  }
  // An asynchronous launch has its error word stored (or copied) into a word of its own, read when
  // it is reaped.
  DeviceRuntime::MappedWord async_mapped;
  if (signal_ev) {
    KJIT_ASSIGN_OR_RETURN(async_mapped, dev->AcquireErrorWord());
  }
  struct ReleaseWord {
    DeviceRuntime* dev;
    uint32_t* word;
    ~ReleaseWord() {
      if (word != nullptr) dev->ReleaseErrorWord(word);
    }
  } release_word{dev, async_mapped.host};
  const CUstream stream = dev->stream();
  // An asynchronous launch's own pinned staging (below). Declared before `drain`, so that on an
  // error return it goes back to the pool only after the stream has been synchronized.
  std::shared_ptr<uint8_t> async_pinned;
  // Once a copy is queued, an error return first waits for the queued work: the regions that `p`
  // holds (released when the caller drops it) and the pinned staging must outlive every use of them
  // on the GPU. A synchronous launch leaves the stream synchronized: the pinned staging is free
  // for the next launch when mu() is released.
  struct DrainOnError {
    const driver::Api* api;
    CUstream stream;
    bool armed = false;
    ~DrainOnError() {
      if (armed) (void)api->cuStreamSynchronize(stream);
    }
  } drain{api, stream};

  if (HasCudaIndptr(*p) && (signal_ev || p->max_draft_hint > 0)) {
    PlanUnchecked(p);  // asynchronous, or bounds given: the kernels check the index pointers
  } else if (HasCudaIndptr(*p)) {
    // Device-resident index pointers: every read-back queued on the read-back stream (after the
    // client's event, which may still be producing them) into pinned memory, one synchronization,
    // then the check on those copies; the launch stages the checked copies.
    const CUstream rb = dev->readback_stream();
    size_t bytes = 0;
    size_t off[3] = {0, 0, 0};
    for (int k = 0; k < 3; ++k) {
      const int i = p->layout.input_slot[kIndptrSlots[k]];
      if (i < 0 || p->input_src[i].kind != Kind::kCuda) continue;
      off[k] = bytes;
      bytes += AlignUp(p->inputs[i].byte_size);
    }
    KJIT_ASSIGN_OR_RETURN(uint8_t* host, dev->PinnedStaging(bytes));
    DrainOnError drain_rb{api, rb, true};
    if (wait_ev) {
      KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamWaitEvent(rb, wait_ev->event->get(), 0),
                                         "cuStreamWaitEvent(kjit_wait_event)"));
    }
    IndptrCopies copies = {nullptr, nullptr, nullptr};
    for (int k = 0; k < 3; ++k) {
      const int i = p->layout.input_slot[kIndptrSlots[k]];
      if (i < 0 || p->input_src[i].kind != Kind::kCuda) continue;
      const TensorSource& s = p->input_src[i];
      copies[k] = host + off[k];
      if (p->inputs[i].byte_size == 0) continue;
      KJIT_RETURN_IF_ERROR(driver::Check(
          api->cuMemcpyDtoHAsync(host + off[k], s.region->cuda->base() + s.offset, p->inputs[i].byte_size, rb),
          "cuMemcpyDtoHAsync(indptr)"));
    }
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamSynchronize(rb), "cuStreamSynchronize(indptr read-back)"));
    drain_rb.armed = false;
    KJIT_RETURN_IF_ERROR(CheckIndptrs(p, copies));
  }
  KJIT_ASSIGN_OR_RETURN(kernels::MlaVerifyPlan plan, family.plan(p->problem, dev->info()));

  // Staging offsets for everything not already in a CUDA region: inputs first, then outputs.
  std::vector<size_t> in_off(p->inputs.size()), out_off(p->outputs.size());
  size_t total = 0;
  for (size_t i = 0; i < p->inputs.size(); ++i) {
    if (p->input_src[i].kind == Kind::kCuda) continue;
    in_off[i] = total;
    total += AlignUp(p->inputs[i].byte_size);
  }
  const size_t in_total = total;
  for (size_t i = 0; i < p->outputs.size(); ++i) {
    if (p->output_src[i].kind == Kind::kCuda) continue;
    out_off[i] = total;
    total += AlignUp(NeededBytes(p->outputs[i]));
  }
  CUdeviceptr staging = 0;
  if (total > 0) {
    KJIT_ASSIGN_OR_RETURN(staging, dev->Staging(total));
  }
  const size_t ws_bytes = std::max(plan.workspace_bytes, plan.error_word_offset + sizeof(uint32_t));
  KJIT_ASSIGN_OR_RETURN(CUdeviceptr workspace, dev->Workspace(ws_bytes));
  // Inputs are staged in pinned host memory (same offsets as the device staging): one contiguous
  // host-to-device copy in (from pageable memory the driver may first wait for everything queued on
  // the stream; on the H200 it did for 4.7 MB), and for a synchronous launch one device-to-host copy
  // out. An asynchronous launch returns before its copy runs, so its inputs get a pinned block of
  // their own, held until the launch is reaped (its outputs are all in CUDA regions).
  uint8_t* pinned = nullptr;
  if (signal_ev && in_total > 0) {
    KJIT_ASSIGN_OR_RETURN(async_pinned, dev->AcquireAsyncStaging(in_total));
    pinned = async_pinned.get();
  } else if (!signal_ev && total > 0) {
    KJIT_ASSIGN_OR_RETURN(pinned, dev->PinnedStaging(total));
  }
  // The error word goes into a mapped host word: the launch's own (asynchronous) or the device's
  // (synchronous). The kernels store it there where the family allows it and they run (N = 0 is a
  // memset); else a copy queued after them does.
  const bool store_word = family.error_word_mappable && p->problem.num_q > 0;
  DeviceRuntime::MappedWord word = async_mapped;
  if (!signal_ev) {
    KJIT_ASSIGN_OR_RETURN(word, dev->MappedErrorWord());
    *static_cast<volatile uint32_t*>(word.host) = 0;  // replaced by the store or the copy
  }

  auto in_addr = [&](int slot) -> CUdeviceptr {
    const int i = p->layout.input_slot[slot];
    if (i < 0) return 0;
    const TensorSource& s = p->input_src[i];
    return s.kind == Kind::kCuda ? s.region->cuda->base() + s.offset : staging + in_off[i];
  };
  auto out_addr = [&](int i) -> CUdeviceptr {
    if (i < 0) return 0;
    const TensorSource& s = p->output_src[i];
    return s.kind == Kind::kCuda ? s.region->cuda->base() + s.offset : staging + out_off[i];
  };
  for (size_t i = 0; i < p->inputs.size(); ++i) {
    const TensorSource& s = p->input_src[i];
    const uint64_t n = p->inputs[i].byte_size;
    if (s.kind == Kind::kCuda || n == 0) continue;
    const std::string& name = p->inputs[i].name;
    // System memory is copied under the SIGBUS guard (a truncated client object must never fault
    // the daemon or the driver).
    if (s.kind == Kind::kSystem) {
      KJIT_RETURN_IF_ERROR(ipc::GuardedCopy(pinned + in_off[i], HostPtr(s), n, SourceName(name, s).c_str()));
    } else {
      std::memcpy(pinned + in_off[i], HostPtr(s), n);
    }
  }
  if (pinned != nullptr && in_total > 0) {
    drain.armed = true;
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemcpyHtoDAsync(staging, pinned, in_total, stream),
                                       "staging the inputs"));
  }
  kernels::MlaVerifyBuffers b;
  b.q = in_addr(kernels::kInQ);
  b.k_extend = in_addr(kernels::kInKExtend);
  b.kv_cache = in_addr(kernels::kInKvCache);
  b.qo_indptr = in_addr(kernels::kInQoIndptr);
  b.kv_indptr = in_addr(kernels::kInKvIndptr);
  b.kv_indices = in_addr(kernels::kInKvIndices);
  b.mask = in_addr(p->problem.mask_kind == kernels::MaskKind::kBool ? kernels::kInCustomMask : kernels::kInPackedMask);
  b.mask_indptr = in_addr(kernels::kInMaskIndptr);
  b.o = out_addr(p->layout.o_output);
  b.lse = out_addr(p->layout.lse_output);
  b.workspace = workspace;
  b.error_word = store_word ? word.device : 0;

  drain.armed = true;
  if (wait_ev) {
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamWaitEvent(stream, wait_ev->event->get(), 0),
                                       "cuStreamWaitEvent(kjit_wait_event)"));
  }
  const auto t0 = std::chrono::steady_clock::now();
  KJIT_RETURN_IF_ERROR(family.launch(*dev->kernels(), plan, p->problem, b, stream));

  for (size_t i = 0; i < p->outputs.size(); ++i) {
    auto* o = resp->add_outputs();
    o->set_name(p->outputs[i].name);
    o->set_datatype(p->outputs[i].datatype);
    for (int64_t dim : p->outputs[i].shape) o->add_shape(dim);
  }
  if (signal_ev) {
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuEventRecord(signal_ev->event->get(), stream),
                                       "cuEventRecord(kjit_signal_event)"));
  }
  // The error word, where the kernels did not store it: after the client's signal event (the client
  // does not wait for this copy), and before the synchronous launch's stream synchronization.
  if (!store_word) {
    KJIT_RETURN_IF_ERROR(driver::Check(
        api->cuMemcpyDtoHAsync(word.host, workspace + plan.error_word_offset, sizeof(uint32_t), stream),
        "reading the error word"));
  }
  if (signal_ev) {
    release_word.word = nullptr;  // queued: the word belongs to the launch now (or leaks on a failure below)
    // Regions and events stay referenced until the launch has finished on the GPU.
    std::vector<std::shared_ptr<const void>> refs = {wait_ev, signal_ev};
    for (const auto& s : p->input_src) refs.push_back(s.region);
    for (const auto& s : p->output_src) refs.push_back(s.region);
    if (async_pinned) refs.push_back(std::move(async_pinned));
    DeviceRuntime::ErrorWatch watch;
    watch.word = word.host;
    if (wait_ev) watch.events.push_back({wait_ev->name, wait_ev});
    watch.events.push_back({signal_ev->name, signal_ev});
    watch.report = [model = p->model->name, id = resp->id(), event = signal_ev->name,
                    slots = p->problem.num_slots](uint32_t err) {
      return absl::StrCat("asynchronous ", model, " launch (id '", id, "', kjit_signal_event '", event,
                          "') failed: ", KernelErrors(err, slots).message());
    };
    KJIT_RETURN_IF_ERROR(dev->HoldUntilDone(std::move(refs), std::move(watch)));
    drain.armed = false;
    for (size_t i = 0; i < p->outputs.size(); ++i) resp->add_raw_output_contents();
    return absl::OkStatus();
  }
  // Outputs and the error word come back in the same batch: one stream synchronization.
  if (total > in_total) {
    KJIT_RETURN_IF_ERROR(driver::Check(
        api->cuMemcpyDtoHAsync(pinned + in_total, staging + in_total, total - in_total, stream),
        "reading the outputs"));
  }
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamSynchronize(stream), "cuStreamSynchronize(launch)"));
  drain.armed = false;
  *compute_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now() - t0).count();
  KJIT_RETURN_IF_ERROR(KernelErrors(*static_cast<volatile uint32_t*>(word.host), p->problem.num_slots));
  for (size_t i = 0; i < p->outputs.size(); ++i) {
    std::string* raw = resp->add_raw_output_contents();
    const TensorSource& s = p->output_src[i];
    const uint64_t n = NeededBytes(p->outputs[i]);
    if (s.kind == Kind::kCuda || n == 0) continue;
    const uint8_t* from = pinned + out_off[i];
    if (s.kind == Kind::kInline) {
      raw->assign(reinterpret_cast<const char*>(from), n);
    } else {  // system memory is written under the SIGBUS guard
      KJIT_RETURN_IF_ERROR(ipc::GuardedCopy(s.region->system->data() + s.offset, from, n,
                                            SourceName(p->outputs[i].name, s).c_str()));
    }
  }
  return absl::OkStatus();
}

}  // namespace kjit::server
