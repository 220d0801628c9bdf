#include "jit_cache/entry_file.h"

#include <openssl/evp.h>

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kjit::cache::internal {
namespace {

void PutU64(std::string& out, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[at + i] = static_cast<char>(v >> (8 * i));
}
void PutU32(std::string& out, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[at + i] = static_cast<char>(v >> (8 * i));
}
uint64_t GetU64(std::string_view in, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(in[at + i])} << (8 * i);
  return v;
}
uint32_t GetU32(std::string_view in, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(in[at + i])} << (8 * i);
  return v;
}

absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }
std::string Esc(std::string_view s) { return absl::CEscape(Av(s)); }

std::string EncodeMeta(const EntryMeta& m) {
  std::string out;
  absl::StrAppend(&out, "family=", Esc(m.family), "\n", "specialization=", Esc(m.specialization),
                  "\n", "arch=", Esc(m.arch), "\n", "nvrtc_version=", Esc(m.nvrtc_version), "\n");
  absl::StrAppend(&out, "compile_ms=", m.compile_ms, "\n", "created_unix=", m.created_unix, "\n");
  for (const auto& o : m.options) absl::StrAppend(&out, "option=", Esc(o), "\n");
  for (const auto& k : m.kernels) {
    const KernelResources& r = k.resources;
    absl::StrAppend(&out, "kernel=", Esc(k.name_expression), "\t", Esc(r.lowered_name), "\t",
                    r.registers, "\t", r.spill_store_bytes, "\t", r.spill_load_bytes, "\t",
                    r.shared_bytes, "\t", r.stack_bytes, "\n");
  }
  return out;
}

Status Bad(std::string_view what) { return absl::DataLossError(absl::StrCat("cache entry: ", Av(what))); }

Status Unescape(absl::string_view in, std::string* out) {
  if (!absl::CUnescape(in, out)) return Bad("bad escape in metadata");
  return absl::OkStatus();
}

Status ParseKernel(absl::string_view value, KernelInfo* k) {
  std::vector<absl::string_view> f = absl::StrSplit(value, '\t');
  if (f.size() != 7) return Bad("bad kernel line in metadata");
  KJIT_RETURN_IF_ERROR(Unescape(f[0], &k->name_expression));
  KernelResources& r = k->resources;
  KJIT_RETURN_IF_ERROR(Unescape(f[1], &r.lowered_name));
  int* ints[] = {&r.registers, &r.spill_store_bytes, &r.spill_load_bytes, &r.shared_bytes, &r.stack_bytes};
  for (int i = 0; i < 5; ++i) {
    if (!absl::SimpleAtoi(f[2 + i], ints[i])) return Bad("bad kernel resource in metadata");
  }
  return absl::OkStatus();
}

Status DecodeMeta(absl::string_view text, EntryMeta* m) {
  int required = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, absl::MaxSplits('=', 1));
    const auto& [name, value] = kv;
    if (name == "family") { ++required; KJIT_RETURN_IF_ERROR(Unescape(value, &m->family)); }
    else if (name == "specialization") { ++required; KJIT_RETURN_IF_ERROR(Unescape(value, &m->specialization)); }
    else if (name == "arch") { ++required; KJIT_RETURN_IF_ERROR(Unescape(value, &m->arch)); }
    else if (name == "nvrtc_version") { ++required; KJIT_RETURN_IF_ERROR(Unescape(value, &m->nvrtc_version)); }
    else if (name == "compile_ms") {
      if (!absl::SimpleAtod(value, &m->compile_ms)) return Bad("bad compile_ms in metadata");
    } else if (name == "created_unix") {
      if (!absl::SimpleAtoi(value, &m->created_unix)) return Bad("bad created_unix in metadata");
    } else if (name == "option") {
      KJIT_RETURN_IF_ERROR(Unescape(value, &m->options.emplace_back()));
    } else if (name == "kernel") {
      KJIT_RETURN_IF_ERROR(ParseKernel(value, &m->kernels.emplace_back()));
    } else {
      return Bad(absl::StrCat("unknown metadata field '", name, "'"));
    }
  }
  if (required != 4) return Bad("metadata lacks family/specialization/arch/nvrtc_version");
  return absl::OkStatus();
}

}  // namespace

std::string PayloadSha256(std::string_view meta, std::string_view cubin) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  EVP_DigestUpdate(ctx, meta.data(), meta.size());
  EVP_DigestUpdate(ctx, cubin.data(), cubin.size());
  EVP_DigestFinal_ex(ctx, digest, &len);
  EVP_MD_CTX_free(ctx);
  return std::string(reinterpret_cast<const char*>(digest), len);
}

std::string EncodeEntry(const Entry& entry) {
  const std::string meta = EncodeMeta(entry.meta);
  const std::string_view cubin(entry.cubin.data(), entry.cubin.size());
  std::string out(kHeaderBytes, '\0');
  out.replace(0, kMagic.size(), kMagic);
  PutU32(out, 8, kFormatVersion);
  PutU32(out, 12, kHeaderBytes);
  std::string digest;
  absl::string_view key_view = Av(entry.key);
  digest = absl::HexStringToBytes(key_view);
  out.replace(16, 32, digest);
  out.replace(48, 32, PayloadSha256(meta, cubin));
  PutU64(out, 80, meta.size());
  PutU64(out, 88, cubin.size());
  PutU64(out, kLastUsedOffset, static_cast<uint64_t>(entry.meta.last_used_unix));
  out += meta;
  out.append(cubin);
  return out;
}

StatusOr<Entry> DecodeEntry(std::string_view file, std::string_view expected_key) {
  if (file.size() < kMagic.size() || file.substr(0, kMagic.size()) != kMagic) {
    return Bad("foreign file (no kjit magic)");
  }
  if (file.size() < kHeaderBytes) return Bad("truncated header");
  if (GetU32(file, 8) != kFormatVersion) return Bad(absl::StrCat("format version ", GetU32(file, 8)));
  if (GetU32(file, 12) != kHeaderBytes) return Bad("bad header size");
  const uint64_t meta_len = GetU64(file, 80), cubin_len = GetU64(file, 88);
  const uint64_t body = file.size() - kHeaderBytes;
  if (meta_len > body || cubin_len != body - meta_len) {
    return Bad(absl::StrCat("length mismatch (file ", file.size(), " bytes, header says ",
                            kHeaderBytes, "+", meta_len, "+", cubin_len, ")"));
  }
  if (file.substr(16, 32) != std::string_view(absl::HexStringToBytes(Av(expected_key)))) {
    return Bad("key digest does not match the file name");
  }
  const std::string_view meta = file.substr(kHeaderBytes, meta_len);
  const std::string_view cubin = file.substr(kHeaderBytes + meta_len);
  if (file.substr(48, 32) != std::string_view(PayloadSha256(meta, cubin))) return Bad("payload checksum mismatch");
  Entry e;
  e.key = std::string(expected_key);
  KJIT_RETURN_IF_ERROR(DecodeMeta(Av(meta), &e.meta));
  e.meta.last_used_unix = static_cast<int64_t>(GetU64(file, kLastUsedOffset));
  e.cubin.assign(cubin.begin(), cubin.end());
  return e;
}

int64_t DecodeLastUsed(std::string_view header) {
  if (header.size() < kHeaderBytes || header.substr(0, kMagic.size()) != kMagic) return 0;
  return static_cast<int64_t>(GetU64(header, kLastUsedOffset));
}

std::string EncodeLastUsed(int64_t unix_seconds) {
  std::string out(8, '\0');
  PutU64(out, 0, static_cast<uint64_t>(unix_seconds));
  return out;
}

}  // namespace kjit::cache::internal
