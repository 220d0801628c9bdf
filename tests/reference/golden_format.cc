// Golden bundle encoding and decoding (format in golden.h).
#include <openssl/sha.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/reference/golden.h"

namespace kjit::reference {
namespace {

void PutBytes(std::string& out, const void* data, size_t n) {
  if (n > 0) out.append(static_cast<const char*>(data), n);
}
template <typename T>
void Put(std::string& out, T v) {
  PutBytes(out, &v, sizeof(v));
}
template <typename T>
void PutArray(std::string& out, std::string_view name, char dtype, const std::vector<T>& v) {
  Put<uint16_t>(out, static_cast<uint16_t>(name.size()));
  out.append(name);
  out.push_back(dtype);
  Put<uint64_t>(out, v.size());
  PutBytes(out, v.data(), v.size() * sizeof(T));
}
std::string HexFloat(float f) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%a", static_cast<double>(f));
  return buf;
}

std::string Header(std::string_view name, const MlaCase& c) {
  const CaseSpec& s = c.spec;
  const kernels::MlaVerifyProblem& p = c.problem;
  std::string h;
  auto kv = [&h](std::string_view k, const std::string& v) { absl::StrAppend(&h, std::string(k), "=", v, "\n"); };
  kv("name", std::string(name));
  kv("seed", absl::StrCat(s.seed));
  kv("prefix_lens", absl::StrJoin(s.prefix_lens, ","));
  kv("draft_lens", absl::StrJoin(s.draft_lens, ","));
  kv("scattered", absl::StrCat(s.scattered ? 1 : 0));
  kv("tree", absl::StrCat(static_cast<int>(s.tree)));
  kv("padded_requests", absl::StrCat(s.padded_requests));
  kv("padded_draft", absl::StrCat(s.padded_draft));
  kv("extra_slots", absl::StrCat(s.extra_slots));
  kv("batch", absl::StrCat(p.batch));
  kv("num_heads", absl::StrCat(p.num_heads));
  kv("num_q", absl::StrCat(p.num_q));
  kv("num_slots", absl::StrCat(p.num_slots));
  kv("num_kv_indices", absl::StrCat(p.num_kv_indices));
  kv("mask_len", absl::StrCat(p.mask_len));
  kv("max_draft", absl::StrCat(p.max_draft));
  kv("max_prefix", absl::StrCat(p.max_prefix));
  kv("mask_kind", absl::StrCat(static_cast<int>(p.mask_kind)));
  kv("is_causal", absl::StrCat(p.is_causal ? 1 : 0));
  kv("write_lse", absl::StrCat(p.write_lse ? 1 : 0));
  kv("sm_scale", HexFloat(p.sm_scale));
  kv("k_scale", HexFloat(p.k_scale));
  kv("v_scale", HexFloat(p.v_scale));
  kv("q_stride_n", absl::StrCat(p.q_stride_n));
  kv("q_stride_h", absl::StrCat(p.q_stride_h));
  kv("k_extend_stride_n", absl::StrCat(p.k_extend_stride_n));
  kv("o_stride_n", absl::StrCat(p.o_stride_n));
  kv("o_stride_h", absl::StrCat(p.o_stride_h));
  if (p.kv_dtype != kernels::KvDtype::kBf16) {  // version 2
    kv("kv_dtype", absl::StrCat(static_cast<int>(p.kv_dtype)));
    kv("fp8_numerics", absl::StrCat(static_cast<int>(p.fp8_numerics)));
  }
  return h;
}

class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  bool Take(void* dst, size_t n) {
    if (b_.size() - pos_ < n) return false;
    std::memcpy(dst, b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool TakeView(size_t n, std::string_view* v) {
    if (b_.size() - pos_ < n) return false;
    *v = b_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  size_t left() const { return b_.size() - pos_; }

 private:
  std::string_view b_;
  size_t pos_ = 0;
};

struct RawArray {
  char dtype;
  uint64_t count;
  std::string_view bytes;
};

template <typename T>
Status Extract(std::map<std::string, RawArray, std::less<>>& arrays, std::string_view name, char dtype,
               std::vector<T>* out) {
  auto it = arrays.find(name);
  if (it == arrays.end()) return absl::DataLossError(absl::StrCat("golden: array '", std::string(name), "' missing"));
  if (it->second.dtype != dtype) {
    return absl::DataLossError(absl::StrCat("golden: array '", std::string(name), "' has dtype ", std::string(1, it->second.dtype)));
  }
  out->resize(it->second.count);
  if (!out->empty()) std::memcpy(out->data(), it->second.bytes.data(), it->second.bytes.size());
  return absl::OkStatus();
}

}  // namespace

std::string SerializeGolden(std::string_view name, const MlaCase& c, const RefOutput& want) {
  const bool fp8 = c.problem.kv_dtype != kernels::KvDtype::kBf16;
  std::string out(kGoldenMagic, 8);
  Put<uint32_t>(out, fp8 ? kGoldenVersion : kGoldenVersionBf16);
  const std::string header = Header(name, c);
  Put<uint32_t>(out, static_cast<uint32_t>(header.size()));
  out += header;
  std::vector<uint8_t> padding(c.row_is_padding.begin(), c.row_is_padding.end());
  Put<uint32_t>(out, fp8 ? 13 : 12);
  PutArray(out, "q", 'H', c.q);
  PutArray(out, "k_extend", 'H', c.k_extend);
  PutArray(out, "kv_cache", 'H', c.kv_cache);
  PutArray(out, "qo_indptr", 'i', c.qo_indptr);
  PutArray(out, "kv_indptr", 'i', c.kv_indptr);
  PutArray(out, "kv_indices", 'q', c.kv_indices);
  PutArray(out, "mask_indptr", 'q', c.mask_indptr);
  PutArray(out, "mask_bool", 'B', c.mask_bool);
  PutArray(out, "mask_packed", 'I', c.mask_packed);
  PutArray(out, "row_is_padding", 'B', padding);
  PutArray(out, "o", 'd', want.o);
  PutArray(out, "lse", 'd', want.lse);
  if (fp8) PutArray(out, "kv_cache_fp8", 'B', c.kv_cache_fp8);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(out.data()), out.size(), digest);
  PutBytes(out, digest, sizeof(digest));
  return out;
}

StatusOr<GoldenBundle> ParseGolden(std::string_view bytes) {
  if (bytes.size() < 8 + 4 + 4 + 4 + SHA256_DIGEST_LENGTH) {
    return absl::DataLossError(absl::StrCat("golden: ", bytes.size(), " bytes is too short"));
  }
  if (bytes.substr(0, 8) != std::string_view(kGoldenMagic, 8)) return absl::DataLossError("golden: bad magic");
  const std::string_view body = bytes.substr(0, bytes.size() - SHA256_DIGEST_LENGTH);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(body.data()), body.size(), digest);
  if (std::memcmp(digest, bytes.data() + body.size(), SHA256_DIGEST_LENGTH) != 0) {
    return absl::DataLossError("golden: SHA-256 mismatch (corrupt or truncated file)");
  }
  Reader r(body.substr(8));
  uint32_t version = 0, header_len = 0, count = 0;
  std::string_view header;
  if (!r.Take(&version, 4)) return absl::DataLossError("golden: no version");
  if (version != kGoldenVersionBf16 && version != kGoldenVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("golden: version ", version, ", reader knows ", kGoldenVersionBf16, " and ", kGoldenVersion));
  }
  if (!r.Take(&header_len, 4) || !r.TakeView(header_len, &header) || !r.Take(&count, 4)) {
    return absl::DataLossError("golden: truncated header");
  }
  std::map<std::string, std::string, std::less<>> kv;
  for (absl::string_view line : absl::StrSplit(absl::string_view(header.data(), header.size()), '\n', absl::SkipEmpty())) {
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) return absl::DataLossError(absl::StrCat("golden: header line '", std::string(line), "'"));
    kv[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  std::map<std::string, RawArray, std::less<>> arrays;
  for (uint32_t i = 0; i < count; ++i) {
    uint16_t name_len = 0;
    std::string_view name, data;
    RawArray a{};
    if (!r.Take(&name_len, 2) || !r.TakeView(name_len, &name) || !r.Take(&a.dtype, 1) || !r.Take(&a.count, 8)) {
      return absl::DataLossError("golden: truncated array header");
    }
    const size_t elem = a.dtype == 'H' ? 2 : a.dtype == 'i' || a.dtype == 'I' ? 4 : a.dtype == 'B' ? 1 : 8;
    if (a.count > r.left() / elem || !r.TakeView(a.count * elem, &a.bytes)) {
      return absl::DataLossError(absl::StrCat("golden: array '", std::string(name), "' runs past the end"));
    }
    arrays[std::string(name)] = a;
  }
  if (r.left() != 0) return absl::DataLossError("golden: trailing bytes");

  GoldenBundle g;
  auto num = [&](std::string_view key, auto* out) -> Status {
    auto it = kv.find(key);
    if (it == kv.end() || !absl::SimpleAtoi(it->second, out)) {
      return absl::DataLossError(absl::StrCat("golden: header key '", std::string(key), "' missing or not a number"));
    }
    return absl::OkStatus();
  };
  auto flt = [&](std::string_view key, float* out) -> Status {
    auto it = kv.find(key);
    if (it == kv.end()) return absl::DataLossError(absl::StrCat("golden: header key '", std::string(key), "' missing"));
    *out = static_cast<float>(std::strtod(it->second.c_str(), nullptr));
    return absl::OkStatus();
  };
  auto list = [&](std::string_view key, std::vector<int>* out) -> Status {
    auto it = kv.find(key);
    if (it == kv.end()) return absl::DataLossError(absl::StrCat("golden: header key '", std::string(key), "' missing"));
    for (absl::string_view item : absl::StrSplit(it->second, ',', absl::SkipEmpty())) {
      int v = 0;
      if (!absl::SimpleAtoi(item, &v)) return absl::DataLossError(absl::StrCat("golden: bad list ", std::string(key)));
      out->push_back(v);
    }
    return absl::OkStatus();
  };
  g.name = kv.count("name") ? kv["name"] : "";
  CaseSpec& s = g.c.spec;
  kernels::MlaVerifyProblem& p = g.c.problem;
  int tree = 0, mask_kind = 0, scattered = 0, causal = 0, lse = 0;
  KJIT_RETURN_IF_ERROR(num("seed", &s.seed));
  KJIT_RETURN_IF_ERROR(list("prefix_lens", &s.prefix_lens));
  KJIT_RETURN_IF_ERROR(list("draft_lens", &s.draft_lens));
  KJIT_RETURN_IF_ERROR(num("scattered", &scattered));
  KJIT_RETURN_IF_ERROR(num("tree", &tree));
  KJIT_RETURN_IF_ERROR(num("padded_requests", &s.padded_requests));
  KJIT_RETURN_IF_ERROR(num("padded_draft", &s.padded_draft));
  KJIT_RETURN_IF_ERROR(num("extra_slots", &s.extra_slots));
  KJIT_RETURN_IF_ERROR(num("batch", &p.batch));
  KJIT_RETURN_IF_ERROR(num("num_heads", &p.num_heads));
  KJIT_RETURN_IF_ERROR(num("num_q", &p.num_q));
  KJIT_RETURN_IF_ERROR(num("num_slots", &p.num_slots));
  KJIT_RETURN_IF_ERROR(num("num_kv_indices", &p.num_kv_indices));
  KJIT_RETURN_IF_ERROR(num("mask_len", &p.mask_len));
  KJIT_RETURN_IF_ERROR(num("max_draft", &p.max_draft));
  KJIT_RETURN_IF_ERROR(num("max_prefix", &p.max_prefix));
  KJIT_RETURN_IF_ERROR(num("mask_kind", &mask_kind));
  KJIT_RETURN_IF_ERROR(num("is_causal", &causal));
  KJIT_RETURN_IF_ERROR(num("write_lse", &lse));
  KJIT_RETURN_IF_ERROR(flt("sm_scale", &p.sm_scale));
  KJIT_RETURN_IF_ERROR(flt("k_scale", &p.k_scale));
  KJIT_RETURN_IF_ERROR(flt("v_scale", &p.v_scale));
  KJIT_RETURN_IF_ERROR(num("q_stride_n", &p.q_stride_n));
  KJIT_RETURN_IF_ERROR(num("q_stride_h", &p.q_stride_h));
  KJIT_RETURN_IF_ERROR(num("k_extend_stride_n", &p.k_extend_stride_n));
  KJIT_RETURN_IF_ERROR(num("o_stride_n", &p.o_stride_n));
  KJIT_RETURN_IF_ERROR(num("o_stride_h", &p.o_stride_h));
  int kv_dtype = 0, fp8_numerics = 0;  // version 1: a bf16 cache
  if (version >= 2) {
    KJIT_RETURN_IF_ERROR(num("kv_dtype", &kv_dtype));
    KJIT_RETURN_IF_ERROR(num("fp8_numerics", &fp8_numerics));
  }
  if (tree < 0 || tree > 2 || mask_kind < 0 || mask_kind > 1 || kv_dtype < 0 || kv_dtype > 1 || fp8_numerics < 0 ||
      fp8_numerics > 1) {
    return absl::DataLossError("golden: bad enum");
  }
  p.kv_dtype = static_cast<kernels::KvDtype>(kv_dtype);
  p.fp8_numerics = static_cast<kernels::Fp8Numerics>(fp8_numerics);
  s.kv_dtype = p.kv_dtype;
  s.fp8_numerics = p.fp8_numerics;
  p.mask_kind = static_cast<kernels::MaskKind>(mask_kind);
  p.is_causal = causal != 0;
  p.write_lse = lse != 0;
  s.scattered = scattered != 0;
  s.tree = static_cast<TreeKind>(tree);
  s.num_heads = p.num_heads;
  s.mask = p.mask_kind;
  s.is_causal = p.is_causal;
  s.write_lse = p.write_lse;
  s.sm_scale = p.sm_scale, s.k_scale = p.k_scale, s.v_scale = p.v_scale;

  MlaCase& c = g.c;
  std::vector<uint8_t> padding;
  KJIT_RETURN_IF_ERROR(Extract(arrays, "q", 'H', &c.q));
  KJIT_RETURN_IF_ERROR(Extract(arrays, "k_extend", 'H', &c.k_extend));
  KJIT_RETURN_IF_ERROR(Extract(arrays, "kv_cache", 'H', &c.kv_cache));
  KJIT_RETURN_IF_ERROR(Extract(arrays, "qo_indptr", 'i', &c.qo_indptr));
  KJIT_RETURN_IF_ERROR(Extract(arrays, "kv_indptr", 'i', &c.kv_indptr));
  KJIT_RETURN_IF_ERROR(Extract(arrays, "kv_indices", 'q', &c.kv_indices));
  KJIT_RETURN_IF_ERROR(Extract(arrays, "mask_indptr", 'q', &c.mask_indptr));
  KJIT_RETURN_IF_ERROR(Extract(arrays, "mask_bool", 'B', &c.mask_bool));
  KJIT_RETURN_IF_ERROR(Extract(arrays, "mask_packed", 'I', &c.mask_packed));
  KJIT_RETURN_IF_ERROR(Extract(arrays, "row_is_padding", 'B', &padding));
  KJIT_RETURN_IF_ERROR(Extract(arrays, "o", 'd', &g.o));
  KJIT_RETURN_IF_ERROR(Extract(arrays, "lse", 'd', &g.lse));
  if (version >= 2) KJIT_RETURN_IF_ERROR(Extract(arrays, "kv_cache_fp8", 'B', &c.kv_cache_fp8));
  c.row_is_padding.assign(padding.begin(), padding.end());

  const int64_t n = p.num_q, h = p.num_heads, b = p.batch;
  const bool fp8 = p.kv_dtype == kernels::KvDtype::kFp8E4m3;
  const bool sizes_ok =
      b >= 0 && n >= 0 && h > 0 && c.qo_indptr.size() == static_cast<size_t>(b + 1) &&
      c.kv_indptr.size() == static_cast<size_t>(b + 1) && c.mask_indptr.size() == static_cast<size_t>(b + 1) &&
      c.q.size() == static_cast<size_t>(n * h * kernels::kMlaKDim) &&
      c.k_extend.size() == static_cast<size_t>(n * kernels::kMlaKDim) &&
      (fp8 ? c.kv_cache_fp8.size() : c.kv_cache.size()) == static_cast<size_t>(p.num_slots * kernels::kMlaKDim) &&
      (fp8 ? c.kv_cache.empty() : c.kv_cache_fp8.empty()) &&
      c.kv_indices.size() == static_cast<size_t>(p.num_kv_indices) &&
      c.row_is_padding.size() == static_cast<size_t>(n) &&
      g.o.size() == static_cast<size_t>(n * h * kernels::kMlaVDim) && g.lse.size() == static_cast<size_t>(n * h) &&
      (b == 0 || (c.qo_indptr[b] == n && c.kv_indptr[b] <= p.num_kv_indices));
  if (!sizes_ok) return absl::DataLossError(absl::StrCat("golden '", g.name, "': array sizes disagree with the header"));
  return g;
}

}  // namespace kjit::reference
