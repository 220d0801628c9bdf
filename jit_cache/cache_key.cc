// The cache key: SHA-256 over a canonical record. Every field is written as a tag and a
// length-prefixed value, so no two different inputs can produce the same byte stream.
#include <openssl/evp.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/escaping.h"
#include "jit_cache/cubin_cache.h"

namespace kjit::cache {
namespace {

class RecordHasher {
 public:
  RecordHasher() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  ~RecordHasher() { EVP_MD_CTX_free(ctx_); }
  RecordHasher(const RecordHasher&) = delete;
  RecordHasher& operator=(const RecordHasher&) = delete;

  void Field(std::string_view tag, std::string_view value) {
    Bytes(tag);
    Bytes(value);
  }
  void Count(std::string_view tag, uint64_t n) { Field(tag, std::to_string(n)); }

  std::string HexDigest() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_, digest, &len);
    return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), len));
  }

 private:
  void Bytes(std::string_view v) {
    unsigned char len[8];
    const uint64_t n = v.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    EVP_DigestUpdate(ctx_, len, sizeof(len));
    EVP_DigestUpdate(ctx_, v.data(), v.size());
  }
  EVP_MD_CTX* ctx_;
};

}  // namespace

std::string ComputeKey(const KeyInputs& in) {
  RecordHasher h;
  h.Field("kjit-cubin-key", std::to_string(kFormatVersion));
  h.Field("source", in.source);

  auto headers = in.headers;
  std::sort(headers.begin(), headers.end());
  h.Count("headers", headers.size());
  for (const auto& [name, content] : headers) {
    h.Field("header.name", name);
    h.Field("header.content", content);
  }
  h.Field("toolkit", in.toolkit_id);

  h.Count("options", in.options.size());
  for (const auto& o : in.options) h.Field("option", o);

  h.Field("arch", in.arch);
  h.Field("output", in.output_kind);
  h.Field("nvrtc", in.nvrtc_version);

  auto names = in.name_expressions;
  std::sort(names.begin(), names.end());
  h.Count("names", names.size());
  for (const auto& n : names) h.Field("name", n);
  return h.HexDigest();
}

bool IsValidKey(std::string_view key) {
  return key.size() == 64 && std::all_of(key.begin(), key.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

const char* OriginName(Origin origin) {
  switch (origin) {
    case Origin::kCompiled: return "compiled";
    case Origin::kDiskHit: return "disk";
    case Origin::kMemoryHit: return "memory";
  }
  return "unknown";
}

}  // namespace kjit::cache
