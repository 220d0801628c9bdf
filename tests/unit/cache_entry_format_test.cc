// Every kjit build that shares a cache directory reads the others' entry files, so the format is
// pinned here byte for byte: a file assembled by hand from entry_file.h's layout parses, and the
// writer produces exactly that file.
#include <gtest/gtest.h>
#include <openssl/sha.h>

#include <string>

#include "absl/strings/escaping.h"
#include "jit_cache/cubin_cache.h"
#include "jit_cache/entry_file.h"

namespace kjit::cache {
namespace {

constexpr char kKey[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
constexpr char kMeta[] =
    "family=fake\nspecialization=s1\narch=sm_120\nnvrtc_version=13.0\ncompile_ms=12.5\n"
    "created_unix=1764400000\noption=-std=c++17\noption=with\\ttab\n"
    "kernel=k<1>\t_Z1kILi1EEvv\t40\t0\t4\t1024\t16\nkernel=k<2>\t_Z1kILi2EEvv\t96\t8\t8\t0\t0\n";
constexpr char kCubin[] = "\x7f" "ELF cubin bytes";

void PutLe(std::string& out, size_t at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out[at + i] = static_cast<char>(v >> (8 * i));
}

std::string HandMadeFile() {
  const std::string meta = kMeta, cubin = kCubin;
  std::string file(128, '\0');
  file.replace(0, 8, "KJITCUBN");
  PutLe(file, 8, 1, 4);    // format version
  PutLe(file, 12, 128, 4); // header size
  file.replace(16, 32, absl::HexStringToBytes(kKey));
  const std::string payload = meta + cubin;
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(payload.data()), payload.size(), digest);
  file.replace(48, 32, std::string(reinterpret_cast<const char*>(digest), sizeof(digest)));
  PutLe(file, 80, meta.size(), 8);
  PutLe(file, 88, cubin.size(), 8);
  PutLe(file, 96, 1764400100, 8);  // last used
  return file + payload;
}

TEST(CacheEntryFormat, AFileInFormat1Parses) {
  StatusOr<Entry> e = internal::DecodeEntry(HandMadeFile(), kKey);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->meta.family, "fake");
  EXPECT_EQ(e->meta.arch, "sm_120");
  EXPECT_EQ(e->meta.options, (std::vector<std::string>{"-std=c++17", "with\ttab"}));
  EXPECT_DOUBLE_EQ(e->meta.compile_ms, 12.5);
  EXPECT_EQ(e->meta.created_unix, 1764400000);
  EXPECT_EQ(e->meta.last_used_unix, 1764400100);
  ASSERT_EQ(e->meta.kernels.size(), 2u);
  const KernelInfo& k = e->meta.kernels[0];
  EXPECT_EQ(k.name_expression, "k<1>");
  EXPECT_EQ(k.resources.lowered_name, "_Z1kILi1EEvv");
  EXPECT_EQ(k.resources.registers, 40);
  EXPECT_EQ(k.resources.spill_store_bytes, 0);
  EXPECT_EQ(k.resources.spill_load_bytes, 4);
  EXPECT_EQ(k.resources.shared_bytes, 1024);
  EXPECT_EQ(k.resources.stack_bytes, 16);
  EXPECT_EQ(e->meta.kernels[1].resources.spill_store_bytes, 8);
  EXPECT_EQ(std::string(e->cubin.data(), e->cubin.size()), kCubin);
}

TEST(CacheEntryFormat, TheWriterProducesFormat1) {
  StatusOr<Entry> e = internal::DecodeEntry(HandMadeFile(), kKey);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(internal::EncodeEntry(*e), HandMadeFile());
  // const_bytes has no place in the file: set or not, the bytes are the same.
  e->meta.kernels[0].resources.const_bytes = 400;
  EXPECT_EQ(internal::EncodeEntry(*e), HandMadeFile());
}

}  // namespace
}  // namespace kjit::cache
