// libkjit_client's description of a kjit_mla_verify_args call (client/cpp/src/verify_args.h), which
// every launch mode starts from: the struct_size rule for callers built before fp8_numerics, and an
// fp8 cache described as the protocol's UINT8 with kjit_kv_dtype, accepted by the family's checks.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "client/cpp/src/verify_args.h"
#include "runtime/kernels/registry.h"
#include "tests/e2e/client_args.h"

namespace kjit::client {
namespace {

using kjit::testing::ValidArgs;

// The value of parameter `name` as a string, or nullopt when the call has none.
std::optional<std::string> StringParam(const VerifyCall& c, const std::string& name) {
  for (const kernels::Param& p : c.params) {
    if (p.name != name) continue;
    const std::string* s = std::get_if<std::string>(&p.value);
    return s != nullptr ? *s : std::string("(not a string)");
  }
  return std::nullopt;
}

const kernels::TensorDesc& Input(const VerifyCall& c, const std::string& name) {
  for (const kernels::TensorDesc& t : c.inputs) {
    if (t.name == name) return t;
  }
  ADD_FAILURE() << "no input " << name;
  return c.inputs.front();
}

// The family's own checks (as in-process, ring and remote run them) on a description.
Status FamilyCheck(const VerifyCall& c) {
  KJIT_ASSIGN_OR_RETURN(const kernels::KernelFamily* f, kernels::FindFamily("mla_verify"));
  KJIT_ASSIGN_OR_RETURN(kernels::TypedParams params, kernels::ConvertParams(f->params(), c.params));
  return f->Check(c.inputs, c.outputs, params).status();
}

TEST(ClientVerifyArgs, CurrentSizeIsUsedAsIs) {
  const kjit_mla_verify_args a = ValidArgs();
  kjit_mla_verify_args storage{};
  auto got = CurrentVerifyArgs(&a, &storage);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, &a);
}

TEST(ClientVerifyArgs, CallersBuiltBeforeFp8NumericsAreAcceptedWithDequant) {
  EXPECT_EQ(kVerifyArgsBeforeFp8Numerics, sizeof(kjit_mla_verify_args) - sizeof(int64_t));
  // An older caller's struct ends before fp8_numerics: it sits in a heap block of exactly its size,
  // so that a read past it is a heap overflow for a sanitizer build, not a read of something else.
  const auto bytes = std::make_unique<unsigned char[]>(kVerifyArgsBeforeFp8Numerics);
  kjit_mla_verify_args a = ValidArgs();
  a.kv_cache.dtype = KJIT_DTYPE_FP8_E4M3;
  a.struct_size = kVerifyArgsBeforeFp8Numerics;
  std::memcpy(bytes.get(), &a, kVerifyArgsBeforeFp8Numerics);
  kjit_mla_verify_args storage;
  std::memset(&storage, 0xff, sizeof(storage));  // every field the copy leaves is set by it
  auto got = CurrentVerifyArgs(reinterpret_cast<const kjit_mla_verify_args*>(bytes.get()), &storage);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(*got, &storage);
  EXPECT_EQ(storage.struct_size, sizeof(kjit_mla_verify_args));
  EXPECT_EQ(storage.fp8_numerics, KJIT_FP8_NUMERICS_DEQUANT);
  EXPECT_EQ(std::memcmp(&storage.q, &a.q, kVerifyArgsBeforeFp8Numerics - offsetof(kjit_mla_verify_args, q)), 0);
  auto call = DescribeVerify(storage);
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(StringParam(*call, "kjit_fp8_numerics"), std::nullopt);
  EXPECT_TRUE(FamilyCheck(*call).ok()) << FamilyCheck(*call);
}

TEST(ClientVerifyArgs, OtherSizesAreInvalidArgumentNamingBoth) {
  for (uint64_t size : {uint64_t{0}, uint64_t{16}, kVerifyArgsBeforeFp8Numerics - 8,
                        kVerifyArgsBeforeFp8Numerics + 4, sizeof(kjit_mla_verify_args) + 8}) {
    kjit_mla_verify_args a = ValidArgs();
    a.struct_size = size;
    kjit_mla_verify_args storage;
    const Status s = CurrentVerifyArgs(&a, &storage).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << size;
    const std::string m(s.message());
    EXPECT_NE(m.find("struct_size is " + std::to_string(size)), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(sizeof(kjit_mla_verify_args))), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(kVerifyArgsBeforeFp8Numerics)), std::string::npos) << m;
    EXPECT_EQ(DescribeVerify(a).status().code(), absl::StatusCode::kInvalidArgument) << size;
  }
}

TEST(ClientVerifyArgs, Bf16CacheHasNoCacheParameters) {
  auto call = DescribeVerify(ValidArgs());
  ASSERT_TRUE(call.ok()) << call.status();
  const kernels::TensorDesc& kv = Input(*call, "kv_cache");
  EXPECT_EQ(kv.datatype, "BF16");
  EXPECT_EQ(kv.byte_size, 4u * 576 * 2);
  EXPECT_EQ(StringParam(*call, "kjit_kv_dtype"), std::nullopt);
  EXPECT_EQ(StringParam(*call, "kjit_fp8_numerics"), std::nullopt);
  EXPECT_TRUE(FamilyCheck(*call).ok()) << FamilyCheck(*call);
}

TEST(ClientVerifyArgs, Fp8CacheIsUint8WithKjitKvDtype) {
  for (int64_t dtype : {int64_t{KJIT_DTYPE_FP8_E4M3}, int64_t{KJIT_DTYPE_UINT8}}) {
    for (int64_t numerics : {int64_t{KJIT_FP8_NUMERICS_DEQUANT}, int64_t{KJIT_FP8_NUMERICS_FP8}}) {
      SCOPED_TRACE(::testing::Message() << "dtype " << dtype << ", numerics " << numerics);
      kjit_mla_verify_args a = ValidArgs();
      a.kv_cache.dtype = dtype;
      a.fp8_numerics = numerics;
      a.k_scale = 0.5;
      a.v_scale = 2.0;
      auto call = DescribeVerify(a);
      ASSERT_TRUE(call.ok()) << call.status();
      const kernels::TensorDesc& kv = Input(*call, "kv_cache");
      EXPECT_EQ(kv.datatype, "UINT8");
      EXPECT_EQ(kv.byte_size, 4u * 576);  // one byte per element
      EXPECT_EQ(StringParam(*call, "kjit_kv_dtype"), "fp8_e4m3");
      EXPECT_EQ(StringParam(*call, "kjit_fp8_numerics"),
                numerics == KJIT_FP8_NUMERICS_FP8 ? std::optional<std::string>("fp8") : std::nullopt);
      EXPECT_EQ(Input(*call, "q").datatype, "BF16");
      EXPECT_TRUE(FamilyCheck(*call).ok()) << FamilyCheck(*call);
    }
  }
}

TEST(ClientVerifyArgs, Fp8ElsewhereOrBadNumericsAreRefused) {
  kjit_mla_verify_args a = ValidArgs();
  a.q.dtype = KJIT_DTYPE_FP8_E4M3;  // only the cache may be fp8
  auto call = DescribeVerify(a);
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(Input(*call, "q").datatype, "FP8_E4M3");
  Status s = FamilyCheck(*call);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'q'"), std::string::npos) << s;

  a = ValidArgs();
  a.fp8_numerics = KJIT_FP8_NUMERICS_FP8;  // with a bf16 cache
  s = DescribeVerify(a).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("fp8_numerics is KJIT_FP8_NUMERICS_FP8 with a bf16 kv_cache"), std::string::npos) << s;
  EXPECT_NE(s.message().find("KJIT_DTYPE_FP8_E4M3"), std::string::npos) << s;

  for (int64_t bad : {int64_t{2}, int64_t{-1}}) {
    a = ValidArgs();
    a.kv_cache.dtype = KJIT_DTYPE_FP8_E4M3;
    a.fp8_numerics = bad;
    s = DescribeVerify(a).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("use KJIT_FP8_NUMERICS_DEQUANT (0) or KJIT_FP8_NUMERICS_FP8 (1)"), std::string::npos)
        << s;
  }

  // A cache of another one-byte type than UINT8 travels under its own name and is refused.
  a = ValidArgs();
  a.kv_cache.dtype = KJIT_DTYPE_BOOL;
  call = DescribeVerify(a);
  ASSERT_TRUE(call.ok()) << call.status();
  s = FamilyCheck(*call);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'kv_cache'"), std::string::npos) << s;
}

}  // namespace
}  // namespace kjit::client
