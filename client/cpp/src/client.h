// One kjit client: the launch mode chosen at creation (the first of the configured order that
// works), and the launcher of that mode.
#pragma once

#include <cuda.h>

#include <memory>
#include <string>
#include <vector>

#include "client/cpp/include/kjit_client.h"
#include "client/cpp/src/daemon_link.h"
#include "client/cpp/src/in_process.h"
#include "client/cpp/src/remote.h"
#include "jit_cache/cubin_cache.h"
#include "runtime/kernels/kernel_compiler.h"

namespace kjit::client {

enum class Mode { kInProcess = KJIT_MODE_IN_PROCESS, kRing = KJIT_MODE_RING, kRemote = KJIT_MODE_REMOTE,
                  kEmbedded = KJIT_MODE_EMBEDDED };

// "in-process,ring,remote,embedded" -> modes; INVALID_ARGUMENT naming an unknown one.
StatusOr<std::vector<Mode>> ParseModes(std::string_view text);
const char* ModeName(Mode m);

class Client {
 public:
  // options may be null. FAILED_PRECONDITION when no mode of the order works, saying why for each.
  static StatusOr<std::unique_ptr<Client>> Create(const kjit_client_options* options);

  Mode mode() const { return mode_; }
  const std::string& describe() const { return describe_; }

  Status Prepare(const std::string& arch);
  // args as the caller built it: struct_size of this header or of an older one (CurrentVerifyArgs).
  Status Verify(const kjit_mla_verify_args* args, CUstream stream, uint64_t* workspace_needed);
  Status CheckErrors(int64_t device, CUstream stream);

 private:
  Client() = default;
  // Sets up `m`; on success sets describe_.
  Status TryMode(Mode m, const kjit_client_options& o);
  Status ConnectOnce(const kjit_client_options& o);

  Mode mode_ = Mode::kInProcess;
  std::string describe_;
  std::string target_;
  Status connect_status_ = absl::UnknownError("not tried");
  bool connect_tried_ = false;
  std::unique_ptr<DaemonLink> link_;
  std::unique_ptr<cache::CubinCache> cache_;
  std::unique_ptr<kernels::KernelCompiler> compiler_;
  std::unique_ptr<InProcessLauncher> in_process_;
  std::unique_ptr<RemoteLauncher> remote_;
};

}  // namespace kjit::client
