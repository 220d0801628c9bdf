// The shared-memory launch ring (ARCHITECTURE.md, "fast path"): one request slot in a POSIX shared
// memory region that the client registered with kjitd (SystemSharedMemoryRegister) and turned into a
// ring (kjit.v1.KernelService/OpenRing). The client writes a serialized request and bumps
// request_seq; a daemon thread that polls the ring runs it through the same code as the gRPC call,
// writes the serialized response and status, and publishes response_seq = request_seq. Both sides
// spin for a while, then sleep on a futex (the other side wakes them only when they said they sleep).
// No syscall and no thread hand-off per call while both are spinning.
//
// Layout (offsets from the region's start; host byte order; the region is at least
// RingBytes(capacity) long):
//   [0, 256)                        RingHeader
//   [256, 256 + capacity)           request bytes (request_bytes of them)
//   [256 + capacity, 256 + 2 cap)   response bytes, then the status message (response_bytes +
//                                   message_bytes of them)
// The daemon treats every byte of the region as untrusted: sizes are bounded by the capacity it
// read when the ring was opened, and every access survives the object being truncated.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/common/status.h"

namespace kjit::ipc {

inline constexpr uint32_t kRingMagic = 0x474e524bu;  // "KRNG"
inline constexpr uint32_t kRingVersion = 1;
inline constexpr size_t kRingHeaderBytes = 256;

struct RingHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t capacity;  // bytes of the request area, and of the response area
  uint32_t reserved;
  alignas(64) uint32_t request_seq;  // client: ++ after the request bytes and request_bytes
  uint32_t request_bytes;
  uint32_t client_sleeping;  // client: 1 while it waits on response_seq's futex
  alignas(64) uint32_t response_seq;  // daemon: = request_seq after the response and status
  uint32_t response_bytes;
  int32_t status_code;     // a gRPC status code
  uint32_t message_bytes;  // the status message, right after the response bytes
  uint32_t daemon_sleeping;  // daemon: 1 while its poller waits on request_seq's futex
};
static_assert(sizeof(RingHeader) <= kRingHeaderBytes, "ring header exceeds its 256 bytes");
// The wire layout, for clients in other languages (client/python/kjit/ring.py spells it out too).
static_assert(offsetof(RingHeader, capacity) == 8 && offsetof(RingHeader, request_seq) == 64 &&
                  offsetof(RingHeader, request_bytes) == 68 && offsetof(RingHeader, client_sleeping) == 72 &&
                  offsetof(RingHeader, response_seq) == 128 && offsetof(RingHeader, response_bytes) == 132 &&
                  offsetof(RingHeader, status_code) == 136 && offsetof(RingHeader, message_bytes) == 140 &&
                  offsetof(RingHeader, daemon_sleeping) == 144,
              "launch ring header layout");

// Where a ring's header may start in memory: its atomic words, and the futexes on them, need their
// alignment (kjitd refuses a ring registered at another offset).
inline constexpr size_t kRingAlignment = alignof(RingHeader);
static_assert(kRingAlignment == 64, "the ring header's cache lines");

// The largest capacity a ring may have (RingClient::Create writes at most this; kjitd refuses more).
inline constexpr uint32_t kRingMaxCapacity = 1u << 31;

// Bytes of a ring with `capacity` bytes for a request and for a response.
constexpr size_t RingBytes(uint32_t capacity) { return kRingHeaderBytes + 2 * static_cast<size_t>(capacity); }

// Futex on a 32-bit word of a shared mapping (not FUTEX_PRIVATE: the other side is another process).
// Wait returns when *word != expected, on a wake, or after `timeout` (whichever first; spurious
// returns are possible); where the futex cannot be used (a word not 4-byte aligned) it sleeps for
// `timeout`. A ring's header must start 64-byte aligned (kRingAlignment).
void FutexWait(const uint32_t* word, uint32_t expected, std::chrono::microseconds timeout);
void FutexWakeAll(const uint32_t* word);

// A spin-wait hint for the polling loops of both sides.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// How long the client spins for its answer before it sleeps on the futex (the daemon's poller
// spins for kjitd --ring-spin-us after each request).
inline constexpr std::chrono::microseconds kRingSpin{200};

// The client's side, over its own mapping of the region.
class RingClient {
 public:
  // Writes a fresh header (sequence 0) at `mem`, `bytes` long: INVALID_ARGUMENT when `bytes` is
  // shorter than a header, or capacity 0. The capacity is what fits: (bytes - 256) / 2, at most
  // 2^31. Call before OpenRing.
  static StatusOr<RingClient> Create(void* mem, size_t bytes);

  uint32_t capacity() const { return capacity_; }

  // Sends `request` and waits for the daemon's answer (at most `timeout`). The call's own result
  // comes back as (status_code, message) next to the response bytes; the returned Status is about
  // the ring: INVALID_ARGUMENT when the request does not fit, DEADLINE_EXCEEDED when no answer came
  // (then the ring must not be used again: a late answer would be taken for the next call's).
  Status Call(std::string_view request, std::string* response, int* status_code, std::string* message,
              std::chrono::microseconds timeout);

 private:
  RingClient(RingHeader* header, uint32_t capacity) : h_(header), capacity_(capacity) {}
  RingHeader* h_;
  uint32_t capacity_;
};

}  // namespace kjit::ipc
