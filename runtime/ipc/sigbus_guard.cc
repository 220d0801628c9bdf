#include "runtime/ipc/sigbus_guard.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>

#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace kjit::ipc {
namespace {

thread_local sigjmp_buf* t_jump = nullptr;  // set only while this thread copies
struct sigaction g_previous;

void OnSigbus(int sig, siginfo_t* info, void* context) {
  if (t_jump != nullptr) siglongjmp(*t_jump, 1);  // memcpy holds no locks: leaving it is safe
  // Not a guarded copy: behave as if this handler were not installed.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if ((g_previous.sa_flags & SA_SIGINFO) == 0 && g_previous.sa_handler != SIG_DFL &&
      g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  // Default action: the faulting access repeats on return and terminates the process.
  signal(SIGBUS, SIG_DFL);
}

void Install() {
  struct sigaction act;
  std::memset(&act, 0, sizeof(act));
  act.sa_sigaction = OnSigbus;
  act.sa_flags = SA_SIGINFO;
  sigemptyset(&act.sa_mask);
  sigaction(SIGBUS, &act, &g_previous);
}

void EnsureInstalled() {
  static std::once_flag installed;
  std::call_once(installed, Install);
}

// Kept out of line so that the copy's registers are not live across sigsetjmp's return.
__attribute__((noinline)) void Copy(void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); }
__attribute__((noinline)) uint32_t Load32(const uint32_t* word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }

Status Truncated(const char* what) {
  return absl::InvalidArgumentError(absl::StrCat(
      what, " is no longer backed by its shared memory object (it was truncated after the "
            "region was registered); unregister and register the region again"));
}

}  // namespace

// The fault path of the guards below. sigsetjmp saves no signal mask (that would be a system call
// per access): the handler leaves SIGBUS blocked in this thread when it jumps out, so unblock it.
static Status Faulted(const char* what) {
  t_jump = nullptr;
  sigset_t bus;
  sigemptyset(&bus);
  sigaddset(&bus, SIGBUS);
  pthread_sigmask(SIG_UNBLOCK, &bus, nullptr);
  return Truncated(what);
}

Status GuardedCopy(void* dst, const void* src, size_t n, const char* what) {
  EnsureInstalled();
  if (n == 0) return absl::OkStatus();
  sigjmp_buf jump;
  if (sigsetjmp(jump, /*savemask=*/0) != 0) return Faulted(what);
  t_jump = &jump;
  Copy(dst, src, n);
  t_jump = nullptr;
  return absl::OkStatus();
}

StatusOr<uint32_t> GuardedLoad32(const uint32_t* word, const char* what) {
  EnsureInstalled();
  sigjmp_buf jump;
  if (sigsetjmp(jump, /*savemask=*/0) != 0) return Faulted(what);
  t_jump = &jump;
  const uint32_t v = Load32(word);
  t_jump = nullptr;
  return v;
}

}  // namespace kjit::ipc
