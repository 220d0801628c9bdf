// Golden bundles: the inputs of one MlaCase and its float64 reference output in one checksummed
// file, so that kernel tests do not depend on the generator staying the same.
//
// Format (little endian), version 1 or 2:
//   "KJITGOLD"  u32 version  u32 header_len  header  u32 array_count  arrays...  sha256[32]
// header: UTF-8 "key=value\n" lines (the CaseSpec, the MlaVerifyProblem sizes/strides; floats as C99
// hex floats, lists comma-separated). Each array: u16 name_len, name, one dtype char (numpy/struct
// codes: H u16, i i32, q i64, B u8, I u32, d f64), u64 element count, the elements. The SHA-256
// covers every byte before it. tests/reference/reference_check.py reads the same format.
// Version 2 adds the cache's element type: header keys kv_dtype and fp8_numerics (the KvDtype and
// Fp8Numerics values) and the array kv_cache_fp8 (B), with kv_cache empty for an fp8 cache. A case
// with a bf16 cache is written as version 1, byte for byte what it was before version 2, so readers
// of version 1 keep reading every bundle they can compute; they refuse the fp8 ones by version.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/common/status.h"
#include "tests/reference/mla_reference.h"

namespace kjit::reference {

inline constexpr char kGoldenMagic[] = "KJITGOLD";  // 8 bytes on disk, no terminator
inline constexpr uint32_t kGoldenVersion = 2;      // the newest version (written for an fp8 cache)
inline constexpr uint32_t kGoldenVersionBf16 = 1;  // written for a bf16 cache
inline constexpr std::string_view kGoldenExtension = ".kjg";

// The file of bundle `name` in directory `dir`.
inline std::string GoldenPath(const std::string& dir, std::string_view name) {
  return dir + "/" + std::string(name) + std::string(kGoldenExtension);
}

struct GoldenBundle {
  std::string name;
  MlaCase c;
  std::vector<double> o;    // the reference's o, [N, H, 512]
  std::vector<double> lse;  // the reference's lse, [N, H]
};

std::string SerializeGolden(std::string_view name, const MlaCase& c, const RefOutput& want);
// Checks magic, version (1 or 2) and checksum first, then every length against the header's sizes.
StatusOr<GoldenBundle> ParseGolden(std::string_view bytes);

Status WriteFileAtomically(const std::string& path, std::string_view bytes);
StatusOr<std::string> ReadWholeFile(const std::string& path);
StatusOr<GoldenBundle> ReadGoldenFile(const std::string& path);

// The committed set: name (file stem) and the spec that regenerates it.
struct GoldenEntry {
  std::string name;
  CaseSpec spec;
};
const std::vector<GoldenEntry>& GoldenCatalog();

// $KJIT_GOLDEN_DIR when set, else the source tree's tests/reference/golden.
std::string GoldenDir();

}  // namespace kjit::reference
