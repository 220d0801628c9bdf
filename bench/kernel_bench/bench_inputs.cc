#include "bench/kernel_bench/bench_inputs.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "tests/reference/mla_reference.h"

namespace kjit::bench {
namespace {

constexpr size_t kPoolElems = size_t{2} << 20;  // 4 MB of random bf16, tiled

StatusOr<driver::DeviceBuffer> Upload(const void* data, size_t bytes) {
  KJIT_ASSIGN_OR_RETURN(driver::DeviceBuffer buf, driver::DeviceBuffer::Alloc(std::max<size_t>(bytes, 256)));
  if (bytes > 0) KJIT_RETURN_IF_ERROR(buf.CopyFromHost(data, bytes));
  return buf;
}

}  // namespace

double ModelBytes(const Shape& s) {
  const double n = static_cast<double>(s.batch) * s.draft;
  const double cache_row = s.kv == kernels::KvDtype::kFp8E4m3 ? 576.0 : 1152.0;  // draft rows stay bf16
  return s.batch * (s.prefix * cache_row + s.draft * 1152.0) + n * s.heads * (576.0 + 512.0) * 2.0 + s.batch * (s.prefix * 8.0 + s.draft * s.draft);
}

double ModelFlops(const Shape& s) {
  return 2.0 * s.batch * static_cast<double>(s.draft) * s.heads * (static_cast<double>(s.prefix) + s.draft) * 1088.0;
}

Status FillRandomBf16(driver::DeviceBuffer& buf, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  const size_t elems = std::min(kPoolElems, buf.size() / 2);
  std::vector<uint16_t> pool(elems);
  for (auto& v : pool) v = reference::FloatToBf16(normal(rng));
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  KJIT_RETURN_IF_ERROR(buf.CopyFromHost(pool.data(), elems * 2));
  // Tile the pool with an odd element shift per copy so rows do not repeat exactly.
  size_t done = elems * 2;
  while (done < buf.size() && done > 512) {
    const size_t n = std::min(done - 256, buf.size() - done) & ~size_t{1};  // source never overlaps
    if (n == 0) break;
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemcpyDtoD(buf.get() + done, buf.get() + 2 * (done / 7 % 64), n),
                                       "tile random pool"));
    done += n;
  }
  return absl::OkStatus();
}

// Fills `buf` with N(0,1) values rounded to e4m3, one byte each, tiled like FillRandomBf16.
Status FillRandomE4m3(driver::DeviceBuffer& buf, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const size_t elems = std::min(kPoolElems, buf.size());
  std::vector<uint8_t> pool(elems);
  for (auto& v : pool) v = reference::DoubleToE4m3(normal(rng));
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  KJIT_RETURN_IF_ERROR(buf.CopyFromHost(pool.data(), elems));
  size_t done = elems;
  while (done < buf.size() && done > 512) {
    const size_t n = std::min(done - 256, buf.size() - done);
    if (n == 0) break;
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemcpyDtoD(buf.get() + done, buf.get() + done / 7 % 64, n),
                                       "tile random pool"));
    done += n;
  }
  return absl::OkStatus();
}

StatusOr<BenchInputs> BenchInputs::Create(const Shape& s, int rotations, uint64_t seed) {
  BenchInputs in;
  const int64_t n = static_cast<int64_t>(s.batch) * s.draft;
  const int64_t per_rot = static_cast<int64_t>(s.batch) * s.prefix;
  const int64_t slots = 1 + per_rot * rotations + 7;
  kernels::MlaVerifyProblem& p = in.problem_;
  p.batch = s.batch;
  p.num_heads = s.heads;
  p.num_q = n;
  p.num_slots = slots;
  p.num_kv_indices = per_rot;
  p.max_draft = s.draft;
  p.max_prefix = s.prefix;
  p.mask_kind = kernels::MaskKind::kBool;
  p.kv_dtype = s.kv;
  p.fp8_numerics = s.numerics;
  p.is_causal = true;
  p.write_lse = true;
  p.sm_scale = 0.14467963f;
  p.q_stride_h = kernels::kMlaKDim;
  p.q_stride_n = int64_t{s.heads} * kernels::kMlaKDim;
  p.o_stride_h = kernels::kMlaVDim;
  p.o_stride_n = int64_t{s.heads} * kernels::kMlaVDim;

  std::vector<int32_t> qo(s.batch + 1), kv(s.batch + 1);
  std::vector<int64_t> mask_indptr(s.batch + 1, 0);
  for (int b = 0; b <= s.batch; ++b) {
    qo[b] = b * s.draft;
    kv[b] = b * s.prefix;
    if (b > 0) mask_indptr[b] = mask_indptr[b - 1] + int64_t{s.draft} * (s.prefix + s.draft);
  }
  p.mask_len = mask_indptr[s.batch];
  std::vector<uint8_t> mask(p.mask_len, 0);
  for (int b = 0; b < s.batch; ++b)
    for (int r = 0; r < s.draft; ++r)
      for (int c = 0; c <= r; ++c) mask[mask_indptr[b] + int64_t{r} * (s.prefix + s.draft) + s.prefix + c] = 1;

  const size_t sizes[] = {static_cast<size_t>(n) * s.heads * kernels::kMlaKDim * 2,
                          static_cast<size_t>(n) * kernels::kMlaKDim * 2,
                          static_cast<size_t>(slots) * kernels::kMlaKDim * (s.kv == kernels::KvDtype::kFp8E4m3 ? 1 : 2)};
  for (int i = 0; i < 3; ++i) {
    KJIT_ASSIGN_OR_RETURN(driver::DeviceBuffer buf, driver::DeviceBuffer::Alloc(sizes[i]));
    if (i == kKvCache && s.kv == kernels::KvDtype::kFp8E4m3) {
      KJIT_RETURN_IF_ERROR(FillRandomE4m3(buf, seed + i));
    } else {
      KJIT_RETURN_IF_ERROR(FillRandomBf16(buf, seed + i));
    }
    in.bufs_.push_back(std::move(buf));
  }
  std::vector<StatusOr<driver::DeviceBuffer>> rest;
  rest.push_back(Upload(qo.data(), qo.size() * 4));
  rest.push_back(Upload(kv.data(), kv.size() * 4));
  rest.push_back(Upload(mask.data(), mask.size()));
  rest.push_back(Upload(mask_indptr.data(), mask_indptr.size() * 8));
  rest.push_back(driver::DeviceBuffer::Alloc(static_cast<size_t>(n) * s.heads * kernels::kMlaVDim * 2));
  rest.push_back(driver::DeviceBuffer::Alloc(static_cast<size_t>(n) * s.heads * 4));
  for (auto& r : rest) {
    if (!r.ok()) return r.status();
    in.bufs_.push_back(std::move(*r));
  }

  // Rotation r uses slots 1 + r * per_rot .. in a random order (scattered pages of size 1).
  std::mt19937_64 rng(seed + 3);
  std::vector<int64_t> idx(per_rot);
  for (int r = 0; r < rotations; ++r) {
    std::iota(idx.begin(), idx.end(), 1 + int64_t{r} * per_rot);
    std::shuffle(idx.begin(), idx.end(), rng);
    KJIT_ASSIGN_OR_RETURN(driver::DeviceBuffer buf, Upload(idx.data(), idx.size() * 8));
    in.kv_indices_.push_back(std::move(buf));
  }
  return in;
}

kernels::MlaVerifyBuffers BenchInputs::Buffers(int r, CUdeviceptr workspace) const {
  kernels::MlaVerifyBuffers b;
  b.q = bufs_[kQ].get();
  b.k_extend = bufs_[kKExtend].get();
  b.kv_cache = bufs_[kKvCache].get();
  b.qo_indptr = bufs_[kQoIndptr].get();
  b.kv_indptr = bufs_[kKvIndptr].get();
  b.kv_indices = kv_indices_[r % kv_indices_.size()].get();
  b.mask = bufs_[kMask].get();
  b.mask_indptr = bufs_[kMaskIndptr].get();
  b.o = bufs_[kO].get();
  b.lse = bufs_[kLse].get();
  b.workspace = workspace;
  return b;
}

}  // namespace kjit::bench
