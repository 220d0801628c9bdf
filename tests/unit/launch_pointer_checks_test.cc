// The launchers' checks of device pointers, on the host: a null or misaligned pointer is refused
// with INVALID_ARGUMENT naming it before anything reaches the driver. A misaligned access in a
// kernel is a sticky CUDA error: the GPU's context, and every client's work on it, would be lost.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "runtime/kernels/mla_verify/launch.h"
#include "runtime/kernels/mla_verify_naive/naive.h"

namespace kjit::kernels {
namespace {

// With a driver, a launch that passes the checks would reach it with these made-up addresses: the
// cases that pass are only run where there is none (CI).
bool HasDriver() { return access("/proc/driver/nvidia/version", F_OK) == 0; }

class NoKernels : public KernelTable {
 public:
  StatusOr<CUfunction> Function(std::string_view, std::string_view, std::string_view) const override {
    return absl::NotFoundError("no kernels in this test");
  }
};

// B = 1, D = 4, H = 8, a bool mask, int32 indptrs, lse and v_extend.
MlaVerifyProblem Problem() {
  MlaVerifyProblem p;
  p.batch = 1;
  p.num_heads = 8;
  p.num_q = 4;
  p.num_slots = 16;
  p.num_kv_indices = 8;
  p.mask_len = 4 * 12;
  p.max_draft = 4;
  p.mask_kind = MaskKind::kBool;
  p.write_lse = true;
  p.check_v_extend = true;
  p.sm_scale = 0.1f;
  p.q_stride_n = 8 * kMlaKDim;
  p.o_stride_n = 8 * kMlaVDim;
  return p;
}

// Every buffer at its own 64 KB-aligned address.
MlaVerifyBuffers Aligned() {
  MlaVerifyBuffers b;
  CUdeviceptr next = 1 << 20;
  for (CUdeviceptr* f : {&b.q, &b.k_extend, &b.kv_cache, &b.v_extend, &b.qo_indptr, &b.kv_indptr, &b.kv_indices,
                         &b.mask, &b.mask_indptr, &b.o, &b.lse, &b.workspace}) {
    *f = next;
    next += 1 << 16;
  }
  return b;
}

// (name, field, the smallest misalignment the kernel cannot take)
std::vector<std::pair<std::string, CUdeviceptr MlaVerifyBuffers::*>> Fields() {
  return {{"q", &MlaVerifyBuffers::q},
          {"k_extend", &MlaVerifyBuffers::k_extend},
          {"v_extend", &MlaVerifyBuffers::v_extend},
          {"qo_indptr", &MlaVerifyBuffers::qo_indptr},
          {"kv_indptr", &MlaVerifyBuffers::kv_indptr},
          {"kv_indices", &MlaVerifyBuffers::kv_indices},
          {"kv_cache", &MlaVerifyBuffers::kv_cache},
          {"mask_indptr", &MlaVerifyBuffers::mask_indptr},
          {"o", &MlaVerifyBuffers::o},
          {"lse", &MlaVerifyBuffers::lse}};
}

TEST(NaiveLaunchPointers, NullOrOddAddressesAreRefusedByName) {
  const MlaVerifyProblem p = Problem();
  auto plan = PlanMlaVerifyNaive(p, driver::DeviceInfo{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const NoKernels none;
  // Aligned: the checks pass (the launch then stops at the driver or the kernel table, not here).
  if (!HasDriver()) {
    const Status base = LaunchMlaVerifyNaive(none, *plan, p, Aligned(), nullptr);
    EXPECT_FALSE(base.ok());  // no driver here
    EXPECT_EQ(std::string(base.message()).find("aligned"), std::string::npos) << base;
    EXPECT_EQ(std::string(base.message()).find("null"), std::string::npos) << base;
  }
  for (const auto& [name, field] : Fields()) {
    for (const CUdeviceptr shift : {CUdeviceptr{1}, CUdeviceptr{2}, CUdeviceptr{4}}) {
      MlaVerifyBuffers b = Aligned();
      b.*field += shift;
      // Elements of 2 bytes (bf16), 4 (int32 indptrs, lse) and 8 (kv_indices, mask_indptr).
      const unsigned align = name == "kv_indices" || name == "mask_indptr" ? 8
                             : name == "qo_indptr" || name == "kv_indptr" || name == "lse" ? 4
                                                                                          : 2;
      if (shift % align == 0 && HasDriver()) continue;
      const Status s = LaunchMlaVerifyNaive(none, *plan, p, b, nullptr);
      if (shift % align == 0) {
        EXPECT_EQ(std::string(s.message()).find("aligned"), std::string::npos) << name << " +" << shift << ": " << s;
        continue;
      }
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name << " +" << shift << ": " << s;
      EXPECT_NE(std::string(s.message()).find(name + " must be " + std::to_string(align) + "-byte aligned"),
                std::string::npos)
          << name << " +" << shift << ": " << s;
    }
    MlaVerifyBuffers b = Aligned();
    b.*field = 0;
    const Status s = LaunchMlaVerifyNaive(none, *plan, p, b, nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name << ": " << s;
    EXPECT_NE(std::string(s.message()).find(name + " is null"), std::string::npos) << name << ": " << s;
  }
}

TEST(NaiveLaunchPointers, AnFp8CacheIsBytesAndAPackedMaskWords) {
  MlaVerifyProblem p = Problem();
  p.kv_dtype = KvDtype::kFp8E4m3;
  p.mask_kind = MaskKind::kPacked;
  p.mask_len = 4;
  auto plan = PlanMlaVerifyNaive(p, driver::DeviceInfo{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const NoKernels none;
  MlaVerifyBuffers b = Aligned();
  b.kv_cache += 1;  // e4m3 elements are bytes
  b.mask_indptr = 0;  // packed rows need none
  Status s;
  if (!HasDriver()) {
    s = LaunchMlaVerifyNaive(none, *plan, p, b, nullptr);
    EXPECT_EQ(std::string(s.message()).find("aligned"), std::string::npos) << s;
    EXPECT_EQ(std::string(s.message()).find("null"), std::string::npos) << s;
  }
  b.mask += 2;
  s = LaunchMlaVerifyNaive(none, *plan, p, b, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find("mask must be 4-byte aligned"), std::string::npos) << s;
}

TEST(LaunchPointer, NamesTheFamilyAndTheBuffer) {
  EXPECT_TRUE(CheckLaunchPointer("f", 64, "x", 16).ok());
  const Status odd = CheckLaunchPointer("mla_verify_naive", 66, "kv_indices", 8);
  EXPECT_EQ(odd.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(odd.message(), "mla_verify_naive launch: kv_indices must be 8-byte aligned");
  EXPECT_EQ(CheckLaunchPointer("mla_verify", 0, "q", 16).message(), "mla_verify launch: q is null");
}

}  // namespace
}  // namespace kjit::kernels
