// Entry source of the mla_verify family: the split kernel and the combine, instantiated per
// specialization through NVRTC name expressions, e.g.
//   kjit::mla::MlaVerifySplit<8, 0>   (H = 8, bool mask; the tile is the compiled arch's)
//   kjit::mla::MlaVerifySplit<8, 0, 1> (the same with a forced TileId, for tests and benchmarks)
//   kjit::mla::MlaVerifySplit<8, 0, 0, 1> (an fp8 e4m3 cache, the arch's tile)
//   kjit::mla::MlaVerifySplit<8, 0, 0, 2> (the same with fp8 numerics on e4m3 warpgroup MMAs: sm_90a)
//   kjit::mla::MlaVerifyCombine<8>
#include "mla_verify/combine.cuh"
#include "mla_verify/split_kernel.cuh"
#include "mla_verify/split_qreg.cuh"
#include "mla_verify/split_wgmma.cuh"
#include "mla_verify/split_wgmma_fp8.cuh"
#include "common/sync.cuh"
#include "mla_verify/timeline.cuh"

// sm_90 runs the warpgroup-MMA tile, which needs the arch-specific target (the runtime compiles
// this family for sm_90a on sm_90 devices; see runtime/kernels/mla_verify_family.cc).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "mla_verify for compute capability 9.0 must be compiled for sm_90a (wgmma)"
#endif

namespace kjit {
namespace mla {

#if defined(__CUDA_ARCH__)
constexpr int kArchMajor = __CUDA_ARCH__ / 100;
#else
constexpr int kArchMajor = 0;
#endif

// The mma.sync tile of a TileId, resolved for the compiled arch.
template <int kTile>
constexpr int kSplitTile = ResolvedTile(kTile, kArchMajor);
template <int kTile>
struct SplitTile {
  using type = Tile32x16;
};
template <>
struct SplitTile<kTile64x64> {
  using type = Tile64x64;
};

template <int kTile>
constexpr bool kSplitUsesWgmma = kTile == kTileArch && UsesWgmmaTile(kArchMajor);
template <int kTile>
constexpr int kSplitThreads = kSplitUsesWgmma<kTile>               ? TileWgmma64x64::kThreads
                              : kSplitTile<kTile> == kTileQReg32x32 ? TileQReg32x32::kThreads
                                                                    : SplitTile<kSplitTile<kTile>>::type::kThreads;

// kMask: 0 = bool bytes, 1 = packed bits (runtime/kernels MaskKind values). kTile: a TileId; the
// default is the compiled arch's tile. kKv: 0 = bf16 cache, 1 = fp8 e4m3 (runtime/kernels KvDtype), 2 =
// fp8 e4m3 with fp8 numerics on e4m3 MMAs (only sm_90a's own tile has this kernel; the plan asks for
// it nowhere else).
template <int kHeads, int kMask, int kTile = kTileArch, int kKv = 0>
__global__ void __launch_bounds__(kSplitThreads<kTile>, 1)
    MlaVerifySplit(const __grid_constant__ MlaVerifyParams p) {
  static_assert(kHeads == 8 || kHeads == 16 || kHeads == 32 || kHeads == 64 || kHeads == 128,
                "heads per rank");
  KJIT_STAMP(kTlEntry);
  // A programmatic dependent launch (sm_90+, plan.main): this launch may start while the kernel
  // before it in the stream (the previous call's combine, or whatever came before) is finishing, so
  // every CTA waits for that grid before it reads or writes anything. Only then do they let this
  // launch's dependents (the tree launch, the combine) start, so that those, too, never overlap the
  // earlier kernel. The tree launch instead overlaps the prefix launch it depends on, which it does
  // not read, and waits for it at its end (below). Without the attribute the wait is a no-op.
  if ((p.flags & kTreeLaunchBit) == 0) WaitForPrimaryGrid();
  AllowDependentLaunch();  // the dependents' CTAs may occupy idle SMs; they wait for this grid
  if (threadIdx.x == 0) CtaErrors() = 0;
  __syncthreads();
  if (kKv != 2 && p.v_extend != nullptr && SplitOfCta() == 0 && blockIdx.x == 0) CheckVExtend(p, LoadRequest(p, blockIdx.y));
  if constexpr (kKv == 2) {
    // Prefix CTAs only: the grid's slab z is split z + 1, and the tree (bf16 k_extend) is a launch of
    // MlaVerifySplit<H, mask, 0, 1> of its own (in one kernel beside the bf16 body, ptxas serialized
    // every wgmma of both).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if constexpr (kSplitUsesWgmma<kTile>) WgmmaFp8SplitKernelBody<kHeads>(p, static_cast<int>(blockIdx.z) + 1);
#endif
    if constexpr (!kSplitUsesWgmma<kTile>) {
      if (threadIdx.x == 0) RaiseError(kErrBadIndptr);  // never planned here
    }
  } else if constexpr (kSplitUsesWgmma<kTile>) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    WgmmaSplitKernelBody<kHeads, kMask == 1, kKv == 1>(p);
#endif
  } else if constexpr (kSplitTile<kTile> == kTileQReg32x32) {
    if constexpr (kKv == 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
      // The tree CTA reads bf16 k_extend; the prefix CTAs e4m3 cache rows.
      if (SplitOfCta() == 0) {
        QRegSplitKernelBody<kHeads, kMask == 1>(p);
      } else {
        QRegSplitKernelBody<kHeads, kMask == 1, true>(p);
      }
#else
      // No e4m3 conversion before sm_89; the plan refuses an fp8 cache there, so this never runs.
      if (threadIdx.x == 0) RaiseError(kErrBadIndptr);
#endif
    } else {
      QRegSplitKernelBody<kHeads, kMask == 1, false, true>(p);
    }
  } else {
    using Cfg = typename SplitTile<kSplitTile<kTile>>::type;
    if constexpr (kKv == 1 && !kHasFp8Variant<Cfg>) {
      // No fp8 variant of this tile (traits.h); the plan refuses it, so this never runs.
      if (threadIdx.x == 0) RaiseError(kErrBadIndptr);
    } else {
      SplitKernelBody<kHeads, kMask == 1, Cfg, kKv == 1>(p);
    }
  }
  __syncthreads();  // every RaiseError of this CTA (the bodies return early only CTA-uniformly)
  if (threadIdx.x == 0)
    p.error_slots[(static_cast<long long>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x] =
        CtaErrors();
  // As the tree launch of the fp8-MMA sequence (programmatic dependent on the prefix launch, which
  // it does not read), this grid completes only after that one: the combine waits for this grid
  // alone.
  if ((p.flags & kTreeLaunchBit) != 0) WaitForPrimaryGrid();
  KJIT_STAMP(kTlExit);
}

template <int kHeads>
__global__ void __launch_bounds__(kCombineThreads)
    MlaVerifyCombine(const __grid_constant__ MlaVerifyParams p) {
  KJIT_STAMP_COMBINE(kTlcEntry);
  CombineBody<kHeads>(p);  // waits for the split kernel's grid (griddepcontrol.wait) in every CTA
  KJIT_STAMP_COMBINE(kTlcExit);
}

}  // namespace mla
}  // namespace kjit
