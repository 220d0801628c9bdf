// The mla_verify tensor schema: a valid description passes and fills the problem; each bad input
// is INVALID_ARGUMENT naming the tensor.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "runtime/kernels/mla_verify/schema.h"

namespace kjit::kernels {
namespace {

struct Case {
  std::vector<TensorDesc> in, out;
  MlaVerifyScalars scalars;
};

uint64_t Bytes(const std::string& dt, std::vector<int64_t> shape) {
  uint64_t n = DatatypeSize(dt);
  for (int64_t d : shape) n *= d;
  return n;
}

TensorDesc T(const std::string& name, const std::string& dt, std::vector<int64_t> shape) {
  return {name, dt, shape, Bytes(dt, shape)};
}

// B = 3, N = 7 (D = 1, 2, 4), H = 16, S = 97, M = 33 kv_indices, custom mask.
Case Valid() {
  Case c;
  c.in = {T("q", "BF16", {7, 16, 576}),      T("k_extend", "BF16", {7, 1, 576}),
          T("kv_cache", "BF16", {97, 1, 576}), T("qo_indptr", "INT32", {4}),
          T("kv_indptr", "INT32", {4}),       T("kv_indices", "INT64", {33}),
          T("custom_mask", "UINT8", {200}),   T("mask_indptr", "INT64", {4})};
  c.out = {T("o", "BF16", {7, 16, 512}), T("lse", "FP32", {7, 16})};
  c.scalars.sm_scale = 0.14467963;
  return c;
}

StatusOr<MlaVerifyProblem> Shapes(const Case& c, MlaVerifyLayout* layout = nullptr) {
  MlaVerifyLayout l;
  return CheckMlaVerifyShapes(c.in, c.out, c.scalars, layout ? layout : &l);
}

void ExpectNamed(const Status& s, const std::string& tensor) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("'" + tensor + "'"), absl::string_view::npos) << s << " (want '" << tensor << "')";
}

TEST(MlaVerifySchema, ValidShapesFillTheProblem) {
  MlaVerifyLayout layout;
  auto p = Shapes(Valid(), &layout);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->batch, 3);
  EXPECT_EQ(p->num_heads, 16);
  EXPECT_EQ(p->num_q, 7);
  EXPECT_EQ(p->num_slots, 97);
  EXPECT_EQ(p->num_kv_indices, 33);
  EXPECT_EQ(p->mask_len, 200);
  EXPECT_EQ(p->mask_kind, MaskKind::kBool);
  EXPECT_TRUE(p->write_lse);
  EXPECT_TRUE(p->is_causal);
  EXPECT_FLOAT_EQ(p->sm_scale, 0.14467963f);
  EXPECT_EQ(p->k_scale, 1.f);
  EXPECT_EQ(p->q_stride_n, 16 * 576);
  EXPECT_EQ(p->o_stride_n, 16 * 512);
  EXPECT_EQ(layout.input_slot[0], 0);
  EXPECT_EQ(layout.input_slot[7], -1);  // no packed mask
  EXPECT_EQ(layout.input_slot[8], 7);
  EXPECT_EQ(layout.lse_output, 1);
}

TEST(MlaVerifySchema, InputOrderIsFreeAndLseOptional) {
  Case c = Valid();
  std::swap(c.in[0], c.in[5]);
  c.out.pop_back();
  MlaVerifyLayout layout;
  auto p = Shapes(c, &layout);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(layout.input_slot[0], 5);
  EXPECT_FALSE(p->write_lse);
}

TEST(MlaVerifySchema, EachBadInputNamesItsTensor) {
  struct Mutation {
    std::string tensor;
    std::function<void(Case&)> apply;
  };
  const std::vector<Mutation> mutations = {
      {"q", [](Case& c) { c.in[0].datatype = "FP16"; }},
      {"q", [](Case& c) { c.in[0] = T("q", "BF16", {7, 16, 512}); }},
      {"q", [](Case& c) { c.in[0] = T("q", "BF16", {7, 16}); }},
      {"q", [](Case& c) { c.in[0].byte_size -= 1; }},
      {"q", [](Case& c) { c.in[0].byte_size += 2; }},
      {"q", [](Case& c) { c.in[0] = T("q", "BF16", {7, 0, 576}); }},
      {"q", [](Case& c) { c.in[0].shape = {-7, 16, 576}; }},
      {"q", [](Case& c) { c.in[0].shape = {std::numeric_limits<int64_t>::max(), 16, 576}; }},
      {"q", [](Case& c) { c.in.erase(c.in.begin()); }},
      {"k_extend", [](Case& c) { c.in[1] = T("k_extend", "BF16", {8, 1, 576}); }},
      {"k_extend", [](Case& c) { c.in[1] = T("k_extend", "BF16", {7, 2, 576}); }},
      {"kv_cache", [](Case& c) { c.in[2] = T("kv_cache", "BF16", {97, 576}); }},
      {"kv_cache", [](Case& c) { c.in[2].byte_size = 0; }},
      {"qo_indptr", [](Case& c) { c.in[3].datatype = "INT64"; }},  // 16 bytes of INT32 [4] as INT64 [4]
      {"qo_indptr", [](Case& c) { c.in[3] = T("qo_indptr", "UINT32", {4}); }},
      {"v_extend", [](Case& c) { c.in.push_back(T("v_extend", "BF16", {7, 1, 576})); }},
      {"v_extend", [](Case& c) { c.in.push_back(T("v_extend", "BF16", {6, 1, 512})); }},
      {"v_extend", [](Case& c) { c.in.push_back(T("v_extend", "FP16", {7, 1, 512})); }},
      {"qo_indptr", [](Case& c) { c.in[3] = T("qo_indptr", "INT32", {1}); }},
      {"kv_indptr", [](Case& c) { c.in[4] = T("kv_indptr", "INT32", {5}); }},
      {"kv_indices", [](Case& c) { c.in[5].datatype = "INT32"; }},
      {"custom_mask", [](Case& c) { c.in[6].datatype = "INT8"; }},
      {"custom_mask", [](Case& c) { c.in.push_back(T("packed_mask", "UINT32", {7})); }},
      {"mask_indptr", [](Case& c) { c.in.pop_back(); }},
      {"mask_indptr", [](Case& c) { c.in[7] = T("mask_indptr", "INT32", {4}); }},
      {"attn_bias", [](Case& c) { c.in.push_back(T("attn_bias", "FP32", {1})); }},
      {"q", [](Case& c) { c.in.push_back(c.in[0]); }},
      {"o", [](Case& c) { c.out.erase(c.out.begin()); }},
      {"o", [](Case& c) { c.out[0].byte_size -= 1; }},
      {"o", [](Case& c) { c.out[0].datatype = "FP32"; }},
      {"lse", [](Case& c) { c.out[1] = T("lse", "FP32", {7, 8}); }},
      {"sm_scale", [](Case& c) { c.scalars.sm_scale.reset(); }},
      {"sm_scale", [](Case& c) { c.scalars.sm_scale = std::numeric_limits<double>::infinity(); }},
      {"k_scale", [](Case& c) { c.scalars.k_scale = 0; }},
      {"v_scale", [](Case& c) { c.scalars.v_scale = -1; }},
      // Positive doubles that fp32 holds as 0 or as a denormal (which the kernels flush to 0).
      {"sm_scale", [](Case& c) { c.scalars.sm_scale = 1e-320; }},
      {"k_scale", [](Case& c) { c.scalars.k_scale = 1e-50; }},
      {"v_scale", [](Case& c) { c.scalars.v_scale = 1e-39; }},
      // Normal scales whose product, the kernels' fp32 score scale, is not.
      {"k_scale", [](Case& c) { c.scalars.sm_scale = 1e30, c.scalars.k_scale = 1e30; }},
      {"k_scale", [](Case& c) { c.scalars.sm_scale = 1e-30, c.scalars.k_scale = 1e-10; }},
  };
  for (size_t i = 0; i < mutations.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("mutation ", i, " on ", mutations[i].tensor));
    Case c = Valid();
    mutations[i].apply(c);
    ExpectNamed(Shapes(c).status(), mutations[i].tensor);
  }
}

// SGLang's CUDA-graph runner keeps qo_indptr as int64; a v_extend is taken to be checked on the GPU.
TEST(MlaVerifySchema, Int64IndexPointersAndVExtend) {
  Case c = Valid();
  c.in[3] = T("qo_indptr", "INT64", {4});
  c.in[4] = T("kv_indptr", "INT64", {4});
  c.in.push_back(T("v_extend", "BF16", {7, 1, 512}));
  MlaVerifyLayout layout;
  auto p = Shapes(c, &layout);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->qo_indptr_64);
  EXPECT_TRUE(p->kv_indptr_64);
  EXPECT_TRUE(p->check_v_extend);
  EXPECT_EQ(layout.input_slot[kInVExtend], 8);
  auto q = Shapes(Valid());
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(q->qo_indptr_64 || q->kv_indptr_64 || q->check_v_extend);
  // Contents: int64 entries are checked as int32 ones are, with no overflow on hostile values.
  const std::vector<int64_t> qo = {0, 1, 3, 7}, kv = {0, 10, 10, 33}, mask = {0, 11, 15, 123};
  MlaVerifyProblem ok = *p;
  ASSERT_TRUE(CheckMlaVerifyIndptrs(std::span<const int64_t>(qo), std::span<const int64_t>(kv), mask, &ok).ok());
  EXPECT_EQ(ok.max_draft, 4);
  const std::vector<int64_t> huge = {0, std::numeric_limits<int64_t>::min(), 3, 7};
  ExpectNamed(CheckMlaVerifyIndptrs(std::span<const int64_t>(huge), std::span<const int64_t>(kv), mask, &ok),
              "qo_indptr");
  const std::vector<int64_t> kv_huge = {0, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(), 33};
  ExpectNamed(CheckMlaVerifyIndptrs(std::span<const int64_t>(qo), std::span<const int64_t>(kv_huge), mask, &ok),
              "kv_indptr");
}

// Index-pointer contents come from client memory: no message quotes them.
TEST(MlaVerifySchema, IndexPointerMessagesNeverQuoteTheContents) {
  auto p = Shapes(Valid());
  ASSERT_TRUE(p.ok());
  const std::vector<int32_t> secret = {1234567, 1234568, 1234569, 1234570}, kv = {0, 10, 10, 33};
  const std::vector<int64_t> mask = {0, 11, 15, 123};
  for (int which = 0; which < 3; ++which) {
    MlaVerifyProblem prob = *p;
    const std::vector<int32_t> qo = which == 0 ? secret : std::vector<int32_t>{0, 1, 3, 7};
    const std::vector<int32_t> k = which == 1 ? std::vector<int32_t>{0, 1234567, 10, 33} : kv;
    const std::vector<int64_t> m = which == 2 ? std::vector<int64_t>{1234567, 11, 15, 123} : mask;
    const Status s = CheckMlaVerifyIndptrs(qo, k, m, &prob);
    ASSERT_FALSE(s.ok()) << which;
    EXPECT_EQ(s.message().find("123456"), std::string::npos) << s;
  }
}

TEST(MlaVerifySchema, OutputCapacityMayExceedTheNeed) {
  Case c = Valid();
  c.out[0].byte_size += 4096;
  EXPECT_TRUE(Shapes(c).ok());
}

TEST(MlaVerifySchema, PackedMask) {
  Case c = Valid();
  c.in[6] = T("packed_mask", "UINT32", {7});  // one word per draft row (D <= 32)
  c.in.pop_back();                            // no mask_indptr with packed
  auto p = Shapes(c);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->mask_kind, MaskKind::kPacked);
  const std::vector<int32_t> qo = {0, 1, 3, 7}, kv = {0, 10, 10, 33};
  EXPECT_TRUE(CheckMlaVerifyIndptrs(qo, kv, {}, &*p).ok());
  p->mask_len = 6;
  ExpectNamed(CheckMlaVerifyIndptrs(qo, kv, {}, &*p), "packed_mask");
}

TEST(MlaVerifySchema, IndptrContents) {
  auto p = Shapes(Valid());
  ASSERT_TRUE(p.ok());
  // D = 1, 2, 4; P = 10, 0, 23; mask spans D*(P+D) = 11, 4, 108 -> 123 <= 200.
  std::vector<int32_t> qo = {0, 1, 3, 7}, kv = {0, 10, 10, 33};
  std::vector<int64_t> mask = {0, 11, 15, 123};
  MlaVerifyProblem ok = *p;
  ASSERT_TRUE(CheckMlaVerifyIndptrs(qo, kv, mask, &ok).ok());
  EXPECT_EQ(ok.max_draft, 4);
  EXPECT_EQ(ok.max_prefix, 23);
  // A nonzero mask start is allowed (offset into a bigger mask buffer).
  std::vector<int64_t> shifted = {50, 61, 65, 173};
  EXPECT_TRUE(CheckMlaVerifyIndptrs(qo, kv, shifted, &ok).ok());

  auto expect_bad = [&](std::vector<int32_t> q, std::vector<int32_t> k, std::vector<int64_t> m,
                        const std::string& tensor) {
    MlaVerifyProblem prob = *p;
    ExpectNamed(CheckMlaVerifyIndptrs(q, k, m, &prob), tensor);
  };
  expect_bad({1, 1, 3, 7}, kv, mask, "qo_indptr");          // does not start at 0
  expect_bad({0, 1, 1, 7}, kv, mask, "qo_indptr");          // D = 0
  expect_bad({0, 2, 1, 7}, kv, mask, "qo_indptr");          // decreasing
  expect_bad({0, 1, 3, 6}, kv, mask, "qo_indptr");          // ends before N
  expect_bad({0, 65, 66, 67}, kv, mask, "qo_indptr");       // D > 64
  expect_bad(qo, {0, 10, 9, 33}, mask, "kv_indptr");        // decreasing
  expect_bad(qo, {0, 10, 10, 34}, mask, "kv_indptr");       // past kv_indices
  expect_bad(qo, {3, 10, 10, 33}, mask, "kv_indptr");       // does not start at 0
  expect_bad(qo, kv, {0, 11, 15, 122}, "mask_indptr");      // wrong span
  expect_bad(qo, kv, {100, 111, 115, 223}, "mask_indptr");  // past the mask
  expect_bad(qo, kv, {-1, 10, 14, 122}, "mask_indptr");     // negative
  expect_bad({0, 1, 3}, kv, mask, "qo_indptr");             // wrong count
  expect_bad(qo, kv, {0, 11}, "mask_indptr");               // wrong count
}

TEST(MlaVerifySchema, DatatypeSizes) {
  EXPECT_EQ(DatatypeSize("BF16"), 2u);
  EXPECT_EQ(DatatypeSize("BOOL"), 1u);
  EXPECT_EQ(DatatypeSize("UINT32"), 4u);
  EXPECT_EQ(DatatypeSize("FP64"), 8u);
  EXPECT_EQ(DatatypeSize("BYTES"), 0u);
  EXPECT_EQ(DatatypeSize("bf16"), 0u);
}

}  // namespace
}  // namespace kjit::kernels

namespace kjit::kernels {
namespace {

// An fp8 e4m3 cache travels as UINT8 with kjit_kv_dtype; the datatype and the parameter must agree,
// and the numerics parameter is an fp8 cache's only.
TEST(MlaVerifySchema, Fp8CacheIsUint8WithItsParameters) {
  Case c = Valid();
  ASSERT_TRUE(Shapes(c).ok());
  EXPECT_EQ(Shapes(c)->kv_dtype, KvDtype::kBf16);
  c.in[2] = T("kv_cache", "UINT8", {97, 1, 576});
  Status s = Shapes(c).status();
  ExpectNamed(s, "kv_cache");
  EXPECT_NE(s.message().find("kjit_kv_dtype"), absl::string_view::npos) << s;  // says what to set
  c.scalars.kv_dtype = "fp8_e4m3";
  auto p = Shapes(c);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->kv_dtype, KvDtype::kFp8E4m3);
  EXPECT_EQ(p->fp8_numerics, Fp8Numerics::kDequant);  // the default
  EXPECT_EQ(p->num_slots, 97);
  c.scalars.fp8_numerics = "fp8";
  ASSERT_TRUE(Shapes(c).ok());
  EXPECT_EQ(Shapes(c)->fp8_numerics, Fp8Numerics::kFp8);
  c.scalars.fp8_numerics = "dequant";
  EXPECT_EQ(Shapes(c)->fp8_numerics, Fp8Numerics::kDequant);
  c.scalars.fp8_numerics = "fp4\nforged";
  s = Shapes(c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("kjit_fp8_numerics"), absl::string_view::npos) << s;
  EXPECT_EQ(s.message().find('\n'), absl::string_view::npos) << s;  // client text is escaped
  c.scalars.fp8_numerics.reset();
  // One byte per element: a bf16-sized buffer is the wrong size, as is a short one.
  c.in[2] = T("kv_cache", "UINT8", {97, 1, 576});
  c.in[2].byte_size += 1;
  ExpectNamed(Shapes(c).status(), "kv_cache");
  c.in[2] = T("kv_cache", "UINT8", {97, 1, 575});
  ExpectNamed(Shapes(c).status(), "kv_cache");
  // BF16 with the fp8 parameter, an unknown cache type, numerics with a bf16 cache.
  c = Valid();
  c.scalars.kv_dtype = "fp8_e4m3";
  s = Shapes(c).status();
  ExpectNamed(s, "kv_cache");
  EXPECT_NE(s.message().find("UINT8"), absl::string_view::npos) << s;
  c.scalars.kv_dtype = "fp8_e5m2";
  s = Shapes(c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("kjit_kv_dtype"), absl::string_view::npos) << s;
  c.scalars.kv_dtype = "bf16";
  ASSERT_TRUE(Shapes(c).ok());
  c.scalars.fp8_numerics = "fp8";
  s = Shapes(c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("fp8 cache only"), absl::string_view::npos) << s;
  // FP8_E4M3 is not a KServe datatype: it is refused by name.
  c = Valid();
  c.in[2] = T("kv_cache", "BF16", {97, 1, 576});
  c.in[2].datatype = "FP8_E4M3";
  ExpectNamed(Shapes(c).status(), "kv_cache");
}

}  // namespace
}  // namespace kjit::kernels
