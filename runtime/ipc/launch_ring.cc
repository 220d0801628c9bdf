#include "runtime/ipc/launch_ring.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"

namespace kjit::ipc {
namespace {

uint32_t Load(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
void Store(uint32_t* p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

}  // namespace

void FutexWait(const uint32_t* word, uint32_t expected, std::chrono::microseconds timeout) {
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000) * 1000;
  if (syscall(SYS_futex, const_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0) == 0) return;
  // Woken early (EAGAIN: the word had changed; EINTR) or timed out: the caller looks again. Any other
  // error (EINVAL for a misaligned word, EFAULT) would return at once every time: sleep instead, so
  // that a waiting loop never spins.
  if (errno != EAGAIN && errno != EINTR && errno != ETIMEDOUT) std::this_thread::sleep_for(timeout);
}

void FutexWakeAll(const uint32_t* word) {
  syscall(SYS_futex, const_cast<uint32_t*>(word), FUTEX_WAKE, std::numeric_limits<int>::max(), nullptr, nullptr,
          0);
}

StatusOr<RingClient> RingClient::Create(void* mem, size_t bytes) {
  if (mem == nullptr || bytes < kRingHeaderBytes + 2)
    return absl::InvalidArgumentError(absl::StrCat("a launch ring needs more than ", kRingHeaderBytes + 1,
                                                   " bytes of shared memory, got ", bytes));
  const size_t cap = std::min<size_t>((bytes - kRingHeaderBytes) / 2, kRingMaxCapacity);
  auto* h = static_cast<RingHeader*>(mem);
  std::memset(h, 0, kRingHeaderBytes);
  h->magic = kRingMagic;
  h->version = kRingVersion;
  h->capacity = static_cast<uint32_t>(cap);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  return RingClient(h, static_cast<uint32_t>(cap));
}

Status RingClient::Call(std::string_view request, std::string* response, int* status_code, std::string* message,
                        std::chrono::microseconds timeout) {
  if (request.size() > capacity_)
    return absl::InvalidArgumentError(absl::StrCat("request of ", request.size(),
                                                   " bytes exceeds the ring's capacity of ", capacity_));
  auto* base = reinterpret_cast<char*>(h_);
  std::memcpy(base + kRingHeaderBytes, request.data(), request.size());
  h_->request_bytes = static_cast<uint32_t>(request.size());
  const uint32_t seq = h_->request_seq + 1;
  Store(&h_->request_seq, seq);
  if (Load(&h_->daemon_sleeping) != 0) FutexWakeAll(&h_->request_seq);

  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  while (Load(&h_->response_seq) != seq) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline)
      return absl::DeadlineExceededError(absl::StrCat("kjitd did not answer on the launch ring within ",
                                                      timeout.count(), " us"));
    if (now - start < kRingSpin) {
      CpuRelax();
      continue;
    }
    Store(&h_->client_sleeping, 1);
    const uint32_t seen = Load(&h_->response_seq);
    if (seen != seq) {
      FutexWait(&h_->response_seq, seen,
                std::chrono::duration_cast<std::chrono::microseconds>(
                    std::min<std::chrono::steady_clock::duration>(deadline - now, std::chrono::milliseconds(10))));
    }
    Store(&h_->client_sleeping, 0);
  }
  const size_t rb = std::min<size_t>(h_->response_bytes, capacity_);
  const size_t mb = std::min<size_t>(h_->message_bytes, capacity_ - rb);
  const char* out = base + kRingHeaderBytes + capacity_;
  response->assign(out, rb);
  message->assign(out + rb, mb);
  *status_code = h_->status_code;
  return absl::OkStatus();
}

}  // namespace kjit::ipc
