// Device copies of one reference::MlaCase (inputs, poisoned outputs, a workspace), shared by the GPU
// tests and the benchmark's reference check.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "runtime/driver/cuda_driver.h"
#include "runtime/kernels/mla_verify/args.h"
#include "tests/reference/mla_reference.h"

namespace kjit::gputest {

// Device copies of one case's inputs and outputs, plus a workspace. Sizes are fixed at construction;
// Upload may write another case of the same problem (CUDA-graph replay with new inputs). The kv_cache
// buffer holds the case's bf16 cache or, with problem.kv_dtype kFp8E4m3, its e4m3 bytes (S * 576).
class DeviceCase {
 public:
  static StatusOr<std::unique_ptr<DeviceCase>> Create(const reference::MlaCase& c, size_t workspace_bytes) {
    auto d = std::unique_ptr<DeviceCase>(new DeviceCase);
    const auto& p = c.problem;
    const bool packed = p.mask_kind == kernels::MaskKind::kPacked;
    KJIT_RETURN_IF_ERROR(d->Alloc(&d->q_, Bytes(c.q)));
    KJIT_RETURN_IF_ERROR(d->Alloc(&d->k_extend_, Bytes(c.k_extend)));
    KJIT_RETURN_IF_ERROR(d->Alloc(&d->kv_cache_, Fp8Cache(c) ? Bytes(c.kv_cache_fp8) : Bytes(c.kv_cache)));
    KJIT_RETURN_IF_ERROR(d->Alloc(&d->qo_indptr_, Bytes(c.qo_indptr)));
    KJIT_RETURN_IF_ERROR(d->Alloc(&d->kv_indptr_, Bytes(c.kv_indptr)));
    KJIT_RETURN_IF_ERROR(d->Alloc(&d->kv_indices_, Bytes(c.kv_indices)));
    KJIT_RETURN_IF_ERROR(d->Alloc(&d->mask_, packed ? Bytes(c.mask_packed) : Bytes(c.mask_bool)));
    KJIT_RETURN_IF_ERROR(d->Alloc(&d->mask_indptr_, Bytes(c.mask_indptr)));
    d->o_bytes_ = static_cast<size_t>(p.num_q) * p.o_stride_n * 2;
    d->lse_bytes_ = static_cast<size_t>(p.num_q) * p.num_heads * 4;
    KJIT_RETURN_IF_ERROR(d->Alloc(&d->o_, d->o_bytes_));
    KJIT_RETURN_IF_ERROR(d->Alloc(&d->lse_, d->lse_bytes_));
    KJIT_RETURN_IF_ERROR(d->Alloc(&d->workspace_, workspace_bytes));
    KJIT_RETURN_IF_ERROR(d->Upload(c));
    return d;
  }

  // Copies the inputs and poisons o, lse (NaN bytes) and the workspace (0xAB: launches must zero
  // what they rely on).
  Status Upload(const reference::MlaCase& c) {
    const bool packed = c.problem.mask_kind == kernels::MaskKind::kPacked;
    KJIT_RETURN_IF_ERROR(Copy(q_, c.q));
    KJIT_RETURN_IF_ERROR(Copy(k_extend_, c.k_extend));
    KJIT_RETURN_IF_ERROR(Fp8Cache(c) ? Copy(kv_cache_, c.kv_cache_fp8) : Copy(kv_cache_, c.kv_cache));
    KJIT_RETURN_IF_ERROR(Copy(qo_indptr_, c.qo_indptr));
    KJIT_RETURN_IF_ERROR(Copy(kv_indptr_, c.kv_indptr));
    KJIT_RETURN_IF_ERROR(Copy(kv_indices_, c.kv_indices));
    KJIT_RETURN_IF_ERROR(packed ? Copy(mask_, c.mask_packed) : Copy(mask_, c.mask_bool));
    KJIT_RETURN_IF_ERROR(Copy(mask_indptr_, c.mask_indptr));
    return Poison();
  }

  // The synchronous copies and memsets run on the legacy stream, which does not order itself with
  // the non-blocking test stream: wait for the whole context before any launch reads the buffers.
  Status Poison() {
    KJIT_RETURN_IF_ERROR(o_->Fill(0xFF));
    KJIT_RETURN_IF_ERROR(lse_->Fill(0xFF));
    KJIT_RETURN_IF_ERROR(workspace_->Fill(0xAB));
    KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
    return driver::Check(api->cuCtxSynchronize(), "synchronize after upload");
  }

  kernels::MlaVerifyBuffers Buffers(bool with_lse) const {
    kernels::MlaVerifyBuffers b;
    b.q = q_->get(), b.k_extend = k_extend_->get(), b.kv_cache = kv_cache_->get();
    b.qo_indptr = qo_indptr_->get(), b.kv_indptr = kv_indptr_->get(), b.kv_indices = kv_indices_->get();
    b.mask = mask_->get(), b.mask_indptr = mask_indptr_->get();
    b.o = o_->get(), b.lse = with_lse ? lse_->get() : 0, b.workspace = workspace_->get();
    return b;
  }

  Status Download(std::vector<uint16_t>* o, std::vector<float>* lse, uint32_t* error_word, size_t error_offset) {
    o->resize(o_bytes_ / 2);
    lse->resize(lse_bytes_ / 4);
    KJIT_RETURN_IF_ERROR(o_->CopyToHost(o->data(), o_bytes_));
    KJIT_RETURN_IF_ERROR(lse_->CopyToHost(lse->data(), lse_bytes_));
    return workspace_->CopyToHost(error_word, sizeof(*error_word), error_offset);
  }

  // The workspace's first `bytes` bytes.
  Status DownloadWorkspace(std::vector<uint8_t>* out, size_t bytes) {
    out->resize(bytes);
    return workspace_->CopyToHost(out->data(), bytes);
  }

 private:
  DeviceCase() = default;
  static bool Fp8Cache(const reference::MlaCase& c) { return c.problem.kv_dtype == kernels::KvDtype::kFp8E4m3; }
  template <typename T>
  static size_t Bytes(const std::vector<T>& v) { return v.size() * sizeof(T); }
  // Every buffer gets at least 256 bytes so empty arrays still have a valid, unique address.
  static Status Alloc(std::unique_ptr<driver::DeviceBuffer>* out, size_t bytes) {
    KJIT_ASSIGN_OR_RETURN(driver::DeviceBuffer b, driver::DeviceBuffer::Alloc(std::max<size_t>(bytes, 256)));
    *out = std::make_unique<driver::DeviceBuffer>(std::move(b));
    return absl::OkStatus();
  }
  template <typename T>
  static Status Copy(const std::unique_ptr<driver::DeviceBuffer>& dst, const std::vector<T>& v) {
    if (v.empty()) return absl::OkStatus();
    return dst->CopyFromHost(v.data(), Bytes(v));
  }
  std::unique_ptr<driver::DeviceBuffer> q_, k_extend_, kv_cache_, qo_indptr_, kv_indptr_, kv_indices_, mask_,
      mask_indptr_, o_, lse_, workspace_;
  size_t o_bytes_ = 0, lse_bytes_ = 0;
};

}  // namespace kjit::gputest
