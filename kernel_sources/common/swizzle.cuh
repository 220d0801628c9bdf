// Byte offsets into row-major shared-memory tiles whose 16-byte chunks are XOR-swizzled by (row % 8)
// within each 128-byte group, so that the eight row addresses of one ldmatrix (same logical chunk,
// consecutive rows) fall in eight different bank groups. Writers and readers agree through these.
#pragma once

namespace kjit {

template <int kChunksPerRow>
__device__ __forceinline__ unsigned SwizzledOffset(int row, int chunk) {
  static_assert(kChunksPerRow % 8 == 0, "rows of whole 128-byte groups");
  return static_cast<unsigned>(row * kChunksPerRow * 16 + ((chunk ^ (row & 7)) << 4));
}

// ldmatrix rows always satisfy row % 8 == lane % 8, so a lane's swizzled chunk offsets within a
// 128-byte group take only four values per pattern: precomputed once, the hot loops then address
// with per-lane bases plus immediates instead of keeping dozens of addresses alive.
struct LaneSwizzle {
  unsigned x[4];  // byte offset of chunk 2*j + hi within a group, for j = 0..3
  __device__ __forceinline__ LaneSwizzle(int lane, int hi) {
#pragma unroll
    for (int j = 0; j < 4; ++j) x[j] = static_cast<unsigned>(((2 * j + hi) ^ (lane & 7)) << 4);
  }
};

}  // namespace kjit
