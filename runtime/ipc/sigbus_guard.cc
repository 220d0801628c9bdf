#include "runtime/ipc/sigbus_guard.h"

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

// Kept out of line so that the copy's registers are not live across sigsetjmp's return.
__attribute__((noinline)) void Copy(void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); }

}  // namespace

Status GuardedCopy(void* dst, const void* src, size_t n, const char* what) {
  static std::once_flag installed;
  std::call_once(installed, Install);
  if (n == 0) return absl::OkStatus();
  sigjmp_buf jump;
  if (sigsetjmp(jump, /*savemask=*/1) != 0) {
    t_jump = nullptr;
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is no longer backed by its shared memory object (it was truncated after the "
              "region was registered); unregister and register the region again"));
  }
  t_jump = &jump;
  Copy(dst, src, n);
  t_jump = nullptr;
  return absl::OkStatus();
}

}  // namespace kjit::ipc
