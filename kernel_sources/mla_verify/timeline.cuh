// Per-CTA timestamps of the mla_verify kernels, compiled in only with -DKJIT_TIMELINE=1 (kernel_bench
// --timeline); otherwise every stamp is empty and the kernels are the production ones. Thread 0 of
// each CTA (for the producer's points, thread 256 of the sm_90a split kernel) writes the SM's
// cycle counter (clock64) at the points below into module globals that kernel_bench reads after
// each launch; at its entry it also writes %globaltimer (ns, which this H200 advances in 256 ns
// steps) to place the CTA against the others, and its SM id. CTAs past the arrays' sizes are not
// recorded.
#pragma once

namespace kjit {
namespace mla {

// Split-kernel points (one row of kTimelinePoints per CTA, by linear block index).
enum TimelinePoint : int {
  kTlEntry = 0,        // first instruction
  kTlRequest = 1,      // request bounds loaded
  kTlTile0Issued = 2,  // tile 0's copies issued (sm_90a producer; mma.sync: with Q)
  kTlQLanded = 3,      // Q in shared memory (mma.sync: Q and tile 0)
  kTlFirstS = 4,       // the first S tile computed (sm_90a)
  kTlLoopEnd = 5,      // every KV tile done
  kTlStaged = 6,       // normalized partial O staged (sm_90a) or written (mma.sync)
  kTlExit = 7,         // partial state and error slot written
  kTlSm = 8,           // the SM id (not a time)
  kTlEntryGlobal = 9,  // %globaltimer at the entry
  kTimelinePoints = 10,
};
// Combine points.
enum CombinePoint : int { kTlcEntry = 0, kTlcWaited = 1, kTlcExit = 2, kTlcSm = 3, kTlcEntryGlobal = 4, kCombinePoints = 5 };
constexpr int kTimelineCtas = 8192;
constexpr int kTimelineCombineCtas = 8192;

}  // namespace mla
}  // namespace kjit

#if defined(KJIT_TIMELINE) && defined(__CUDACC__)
extern "C" {  // definitions (one translation unit per program), unmangled for cuModuleGetGlobal
__device__ unsigned long long kjit_timeline_split[kjit::mla::kTimelineCtas * kjit::mla::kTimelinePoints];
__device__ unsigned long long kjit_timeline_combine[kjit::mla::kTimelineCombineCtas * kjit::mla::kCombinePoints];
}

namespace kjit {
namespace mla {
__device__ __forceinline__ unsigned long long TimelineGlobal() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned long long TimelineClock() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned TimelineSm() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}
__device__ __forceinline__ long long TimelineCta() {
  return (static_cast<long long>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
}
__device__ __forceinline__ void TimelineStamp(int point, int thread) {
  const long long cta = TimelineCta();
  if (static_cast<int>(threadIdx.x) != thread || cta >= kTimelineCtas) return;
  unsigned long long* row = kjit_timeline_split + cta * kTimelinePoints;
  if (point == kTlEntry) {
    row[kTlEntryGlobal] = TimelineGlobal();
    row[kTlSm] = TimelineSm();
  }
  row[point] = TimelineClock();
}
__device__ __forceinline__ void TimelineCombineStamp(int point) {
  const long long cta = TimelineCta();
  if (threadIdx.x != 0 || cta >= kTimelineCombineCtas) return;
  unsigned long long* row = kjit_timeline_combine + cta * kCombinePoints;
  if (point == kTlcEntry) {
    row[kTlcEntryGlobal] = TimelineGlobal();
    row[kTlcSm] = TimelineSm();
  }
  row[point] = TimelineClock();
}
}  // namespace mla
}  // namespace kjit
#define KJIT_STAMP(point) ::kjit::mla::TimelineStamp((point), 0)
#define KJIT_STAMP_BY(point, thread) ::kjit::mla::TimelineStamp((point), (thread))
#define KJIT_STAMP_COMBINE(point) ::kjit::mla::TimelineCombineStamp(point)
#else
#define KJIT_STAMP(point) \
  do {                    \
  } while (0)
#define KJIT_STAMP_BY(point, thread) \
  do {                               \
  } while (0)
#define KJIT_STAMP_COMBINE(point) \
  do {                            \
  } while (0)
#endif
