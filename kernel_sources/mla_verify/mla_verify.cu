// Entry source of the mla_verify family: the split kernel and the combine, instantiated per
// specialization through NVRTC name expressions, e.g.
//   kjit::mla::MlaVerifySplit<8, 0>   (H = 8, bool mask; the tile is the compiled arch's)
//   kjit::mla::MlaVerifyCombine<8>
#include "mla_verify/combine.cuh"
#include "mla_verify/split_kernel.cuh"

namespace kjit {
namespace mla {

#if defined(__CUDA_ARCH__)
using ArchTile = TileFor<UsesLargeTile(__CUDA_ARCH__ / 100)>::type;
#else
using ArchTile = ConfigSmall;
#endif

// kMask: 0 = bool bytes, 1 = packed bits (runtime/kernels MaskKind values).
template <int kHeads, int kMask>
__global__ void __launch_bounds__(ArchTile::kThreads, 1)
    MlaVerifySplit(const __grid_constant__ MlaVerifyParams p) {
  static_assert(kHeads == 8 || kHeads == 16 || kHeads == 32 || kHeads == 64 || kHeads == 128,
                "heads per rank");
  SplitKernelBody<kHeads, kMask == 1, ArchTile>(p);
}

template <int kHeads>
__global__ void __launch_bounds__(kCombineThreads)
    MlaVerifyCombine(const __grid_constant__ MlaVerifyParams p) {
  CombineBody<kHeads>(p);
}

}  // namespace mla
}  // namespace kjit
