// libFuzzer: the cubin cache's entry file parser. Input byte 0 picks the mode: even, the bytes are
// the whole file; odd, the rest is "metadata\0cubin" wrapped in a valid header (right lengths, key
// digest and checksum), so the metadata parser behind the checksum is reached. A decoded entry must
// encode back to a file that decodes to the same entry.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/strings/escaping.h"
#include "jit_cache/entry_file.h"

namespace {

constexpr std::string_view kKey = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

void PutU64(std::string* s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) (*s)[at + i] = static_cast<char>(v >> (8 * i));
}

std::string Wrap(std::string_view meta, std::string_view cubin) {
  using namespace kjit::cache::internal;
  std::string file(kHeaderBytes, '\0');
  std::memcpy(file.data(), kMagic.data(), 8);
  const std::string version = EncodeEntry([] {
    kjit::cache::Entry e;
    e.key = std::string(kKey);
    return e;
  }()).substr(8, 8);  // format version and header size, as the encoder writes them
  std::memcpy(file.data() + 8, version.data(), 8);
  const std::string digest = absl::HexStringToBytes(absl::string_view(kKey.data(), kKey.size()));
  std::memcpy(file.data() + 16, digest.data(), 32);
  PutU64(&file, 80, meta.size());
  PutU64(&file, 88, cubin.size());
  const std::string sum = PayloadSha256(meta, cubin);
  std::memcpy(file.data() + 48, sum.data(), 32);
  file.append(meta);
  file.append(cubin);
  return file;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kjit::cache::internal;
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string file;
  if (data[0] & 1) {
    const size_t nul = rest.find('\0');
    file = Wrap(rest.substr(0, nul), nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1));
  } else {
    file = std::string(rest);
  }
  (void)DecodeLastUsed(file);
  auto entry = DecodeEntry(file, kKey);
  if (!entry.ok()) return 0;
  auto again = DecodeEntry(EncodeEntry(*entry), kKey);
  if (!again.ok() || again->cubin != entry->cubin || EncodeEntry(*again) != EncodeEntry(*entry)) __builtin_trap();
  return 0;
}
