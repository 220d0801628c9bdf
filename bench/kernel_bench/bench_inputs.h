// Device inputs of one benchmark shape: random N(0,1) bf16 q / k_extend / kv_cache (or the kv_cache in
// fp8 e4m3: N(0,1) rounded to e4m3), scattered
// kv_indices, a chain (causal) tree mask, and several rotations of disjoint slot sets so that
// consecutive timed launches do not find their KV rows in the 50 MB L2.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/kernels/mla_verify/args.h"

namespace kjit::bench {

struct Shape {
  std::string label;
  int batch = 1;
  int heads = 8;
  int draft = 16;   // D_b of every request
  int prefix = 0;   // P_b of every request
  kernels::KvDtype kv = kernels::KvDtype::kBf16;
  kernels::Fp8Numerics numerics = kernels::Fp8Numerics::kDequant;
};

// Bytes and FLOPs of the roofline model (KERNEL.md "Performance model").
double ModelBytes(const Shape& s);
double ModelFlops(const Shape& s);

class BenchInputs {
 public:
  // rotations >= 1 sets of kv_indices, each a random permutation over its own slots.
  static StatusOr<BenchInputs> Create(const Shape& s, int rotations, uint64_t seed);

  const kernels::MlaVerifyProblem& problem() const { return problem_; }
  int rotations() const { return static_cast<int>(kv_indices_.size()); }
  // Buffers for rotation r; o / lse / workspace are shared.
  kernels::MlaVerifyBuffers Buffers(int r, CUdeviceptr workspace) const;

 private:
  enum Buf { kQ, kKExtend, kKvCache, kQoIndptr, kKvIndptr, kMask, kMaskIndptr, kO, kLse, kNumBufs };
  BenchInputs() = default;
  kernels::MlaVerifyProblem problem_;
  std::vector<driver::DeviceBuffer> bufs_;  // indexed by Buf
  std::vector<driver::DeviceBuffer> kv_indices_;
};

// Fills `buf` with N(0,1) bf16 values (a random host pool tiled across the buffer).
Status FillRandomBf16(driver::DeviceBuffer& buf, uint64_t seed);

}  // namespace kjit::bench
