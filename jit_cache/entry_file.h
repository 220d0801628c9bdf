// The on-disk format of one cache entry:
//
//   offset  size  field
//        0     8  magic "KJITCUBN"
//        8     4  format version (kFormatVersion), little-endian like every integer here
//       12     4  header size (kHeaderBytes)
//       16    32  key digest (the key's 32 bytes)
//       48    32  SHA-256 of the payload (metadata text + cubin)
//       80     8  metadata length
//       88     8  cubin length
//       96     8  last-used unix time: the one field rewritten in place, so not in the checksum
//      104    24  zero
//      128        metadata: "name=value" lines, values C-escaped (readable with `head -c 2000`)
//                 then the cubin
//
// Any mismatch (magic, version, lengths vs file size, key, checksum, metadata syntax) is a
// DataLoss status naming the defect; the cache treats it as a miss and replaces the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "jit_cache/cubin_cache.h"
#include "runtime/common/status.h"

namespace kjit::cache::internal {

inline constexpr std::string_view kMagic = "KJITCUBN";
inline constexpr size_t kHeaderBytes = 128;
inline constexpr size_t kLastUsedOffset = 96;
// No cubin of ours comes near this (the largest is a few MiB); a bigger file is refused unread.
inline constexpr uint64_t kMaxEntryBytes = uint64_t{256} << 20;

// The SHA-256 of the payload (metadata text, then cubin) that bytes 48..80 hold.
std::string PayloadSha256(std::string_view meta, std::string_view cubin);

// The whole file for `entry` (entry.key must be a valid key).
std::string EncodeEntry(const Entry& entry);

// Parses and checks a whole file that must hold `expected_key`.
StatusOr<Entry> DecodeEntry(std::string_view file, std::string_view expected_key);

// From the fixed header only (no checksum): the last-used stamp, or 0 when the header is not ours.
int64_t DecodeLastUsed(std::string_view header);

// The 8 bytes to pwrite at kLastUsedOffset.
std::string EncodeLastUsed(int64_t unix_seconds);

}  // namespace kjit::cache::internal
