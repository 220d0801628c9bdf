// The sm_120 proxy's arithmetic (bench/kernel_bench/proxy_model.h): residency on the target, the
// padding that gives the H200 the same residency, and the projection with its floor.
#include "bench/kernel_bench/proxy_model.h"

#include <gtest/gtest.h>

namespace kjit::bench {
namespace {

// 228 KB per SM, 227 KB per block.
constexpr SmLimits kH200{.smem_per_sm = 233472, .smem_per_block = 232448, .regs_per_sm = 65536, .threads_per_sm = 2048,
                         .max_ctas_per_sm = 32};

int H200Ctas(const CtaResources& c) { return CtasPerSm(c, kH200); }
int TargetCtas(const CtaResources& c) { return CtasPerSm(c, RtxPro6000().sm); }

TEST(ProxyModel, TargetFacts) {
  const TargetGpu t = RtxPro6000();
  EXPECT_EQ(t.sms, 188);
  EXPECT_EQ(t.sm.smem_per_block, 101376);
  EXPECT_EQ(t.cc_major, 12);
  // Its per-SM share of DRAM: 1792 GB/s over 188 SMs at 2.6 GHz.
  EXPECT_NEAR(t.dram_bytes_per_s / (t.sms * t.clock_hz), 3.666, 0.001);
}

TEST(ProxyModel, SharedMemoryLimitsTheTargetToOneCtaAndThePaddingMatchesIt) {
  // About the 32x16 mma.sync tile: 128 threads, 244 registers, ~79 KB of shared memory.
  CtaResources c{128, 244, 16, 80000};
  EXPECT_EQ(TargetCtas(c), 1);  // 100 KB per SM holds one
  EXPECT_EQ(H200Ctas(c), 2);    // 228 KB holds two
  const int padded = PaddedDynamicSmem(c, 1, kH200);
  ASSERT_GT(padded, c.dynamic_smem);
  CtaResources p = c;
  p.dynamic_smem = padded;
  EXPECT_EQ(H200Ctas(p), 1);
  p.dynamic_smem = padded - 1;  // the smallest such request
  EXPECT_EQ(H200Ctas(p), 2);
}

TEST(ProxyModel, NoPaddingWhenAnotherLimitAlreadyHoldsTheResidency) {
  // 256 threads x 255 registers: 64K registers, one CTA per SM on both GPUs.
  CtaResources c{256, 255, 0, 20000};
  EXPECT_EQ(TargetCtas(c), 1);
  EXPECT_EQ(H200Ctas(c), 1);
  EXPECT_EQ(PaddedDynamicSmem(c, 1, kH200), c.dynamic_smem);
  // Small CTAs: the target's 1536 threads and 24 CTAs; the H200 is padded down to the same count.
  CtaResources s{64, 32, 0, 4096};
  const int target = TargetCtas(s);
  EXPECT_EQ(target, 20);  // 102400 / (4096 + 1024)
  CtaResources q = s;
  q.dynamic_smem = PaddedDynamicSmem(s, target, kH200);
  EXPECT_EQ(H200Ctas(q), target);
  EXPECT_EQ(PaddedDynamicSmem(s, 0, kH200), -1);
}

TEST(ProxyModel, ProjectionScalesBySmClocksAndNeverBeatsTheFloor) {
  const TargetGpu t = RtxPro6000();
  // Compute-bound: 1 TFLOP measured in 1 ms on 132 SMs at 1.98 GHz is 3826 FLOP per SM clock, more
  // than the target's peak: the projection is the target's compute floor.
  Projection c = Project(1e12, 1e9, 1e-3, 132, 1.98e9, t);
  EXPECT_NEAR(c.flop_per_smclk, 1e12 / (1e-3 * 132 * 1.98e9), 1e-6);
  EXPECT_NEAR(c.scaled_s, 1e-3 * 132 * 1.98e9 / (188 * 2.6e9), 1e-12);
  EXPECT_EQ(c.bound, "compute");
  EXPECT_NEAR(c.floor_s, 1e12 / (1024.0 * 188 * 2.6e9), 1e-12);
  EXPECT_DOUBLE_EQ(c.projected_s, c.floor_s);
  EXPECT_DOUBLE_EQ(c.ratio, 1.0);
  // Memory-bound and slower than the floor: the scaled time stands.
  Projection m = Project(1e9, 1e9, 2e-3, 132, 1.98e9, t);
  EXPECT_EQ(m.bound, "memory");
  EXPECT_NEAR(m.floor_s, 1e9 / 1792e9, 1e-12);
  EXPECT_DOUBLE_EQ(m.projected_s, m.scaled_s);
  EXPECT_NEAR(m.ratio, m.scaled_s / m.floor_s, 1e-9);
  EXPECT_NEAR(m.bytes_per_smclk, 1e9 / (2e-3 * 132 * 1.98e9), 1e-9);
  // Nothing measured: nothing projected.
  EXPECT_EQ(Project(1, 1, 0, 132, 1.98e9, t).projected_s, 0);
}

TEST(ProxyModel, WaveProjectionScalesByClocksAndWaves) {
  const TargetGpu t = RtxPro6000();
  // 188 CTAs of one per SM: one wave on the target, two on 132 SMs.
  EXPECT_NEAR(WaveProjectedSeconds(290e-6, 1.98e9, 188, 1, 132, t, 0), 290e-6 * 1.98 / 2.6 / 2, 1e-12);
  // 132 CTAs: one wave on both; only the clocks differ.
  EXPECT_NEAR(WaveProjectedSeconds(16e-6, 1.98e9, 132, 1, 132, t, 0), 16e-6 * 1.98 / 2.6, 1e-12);
  // 768 CTAs: 5 waves there against 6 here; two CTAs per SM halve both.
  EXPECT_NEAR(WaveProjectedSeconds(1e-3, 1.98e9, 768, 1, 132, t, 0), 1e-3 * 1.98 / 2.6 * 5 / 6, 1e-12);
  EXPECT_NEAR(WaveProjectedSeconds(1e-3, 1.98e9, 768, 2, 132, t, 0), 1e-3 * 1.98 / 2.6 * 3 / 3, 1e-12);
  // Never below the floor; nothing for an empty grid.
  EXPECT_DOUBLE_EQ(WaveProjectedSeconds(1e-6, 1.98e9, 188, 1, 132, t, 5e-6), 5e-6);
  EXPECT_EQ(WaveProjectedSeconds(1e-3, 1.98e9, 0, 1, 132, t, 0), 0);
}

}  // namespace
}  // namespace kjit::bench
