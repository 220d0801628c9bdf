// Entry source of the mla_verify family: the split kernel and the combine, instantiated per
// specialization through NVRTC name expressions, e.g.
//   kjit::mla::MlaVerifySplit<8, 0>   (H = 8, bool mask; the tile is the compiled arch's)
//   kjit::mla::MlaVerifySplit<8, 0, 1> (the same with a forced TileId, for benchmarks)
//   kjit::mla::MlaVerifyCombine<8>
#include "mla_verify/combine.cuh"
#include "mla_verify/split_kernel.cuh"
#include "common/sync.cuh"

namespace kjit {
namespace mla {

#if defined(__CUDA_ARCH__)
using ArchTile = TileFor<UsesLargeTile(__CUDA_ARCH__ / 100)>::type;
#else
using ArchTile = TileFor<false>::type;
#endif

template <int kTile>
struct SplitTile {
  using type = ArchTile;
};
template <>
struct SplitTile<kTile16x32> {
  using type = ConfigSmall;
};
template <>
struct SplitTile<kTile32x16> {
  using type = ConfigSmall32;
};

// kMask: 0 = bool bytes, 1 = packed bits (runtime/kernels MaskKind values). kTile: a TileId; the
// default is the compiled arch's tile.
template <int kHeads, int kMask, int kTile = kTileArch>
__global__ void __launch_bounds__(SplitTile<kTile>::type::kThreads, 1)
    MlaVerifySplit(const __grid_constant__ MlaVerifyParams p) {
  static_assert(kHeads == 8 || kHeads == 16 || kHeads == 32 || kHeads == 64 || kHeads == 128,
                "heads per rank");
  AllowDependentLaunch();  // the combine's CTAs may occupy idle SMs; they wait for this grid
  SplitKernelBody<kHeads, kMask == 1, typename SplitTile<kTile>::type>(p);
}

template <int kHeads>
__global__ void __launch_bounds__(kCombineThreads)
    MlaVerifyCombine(const __grid_constant__ MlaVerifyParams p) {
  WaitForPrimaryGrid();  // first, in every CTA: the grid never completes before the split kernel
  CombineBody<kHeads>(p);
}

}  // namespace mla
}  // namespace kjit
