#include "runtime/server/flags.h"

#include <algorithm>

#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "runtime/nvrtc/compiler.h"

namespace kjit::server {
namespace {

bool UsableDir(const std::string& dir) {
  struct stat st;
  return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && access(dir.c_str(), W_OK | X_OK) == 0;
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

// HOST:PORT with a port in 1..65535 (an IPv6 host in brackets); `example` shows the form.
Status CheckListen(const std::string& flag, const std::string& v, const char* example) {
  const size_t colon = v.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == v.size()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", v, "' is not HOST:PORT (e.g. ", example, ")"));
  }
  const std::string port = v.substr(colon + 1);
  int p = 0;
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos || !absl::SimpleAtoi(port, &p) ||
      p < 1 || p > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": port '", port, "' is not in 1..65535"));
  }
  return absl::OkStatus();
}

// The metrics server (civetweb) binds numeric addresses only: an IPv4 address, [IPv6], or
// localhost (taken as 127.0.0.1). Returns the address to bind.
StatusOr<std::string> CheckMetricsListen(const std::string& v) {
  KJIT_RETURN_IF_ERROR(CheckListen("--metrics-listen", v, "127.0.0.1:8002"));
  const size_t colon = v.rfind(':');
  const std::string host = v.substr(0, colon);
  if (host == "localhost") return absl::StrCat("127.0.0.1", v.substr(colon));
  in_addr v4;
  in6_addr v6;
  const bool ipv6 = host.size() > 2 && host.front() == '[' && host.back() == ']' &&
                    inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &v6) == 1;
  if (!ipv6 && inet_pton(AF_INET, host.c_str(), &v4) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics-listen: host '", host, "' is not an IPv4 address, "
                                                   "[IPv6 address] or localhost"));
  }
  return v;
}

// A whole number in [lo, hi] for `flag`.
Status Count(const std::string& flag, const std::string& value, int64_t lo, int64_t hi, int64_t* out) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(value, &v) || v < lo || v > hi) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", value, "' is not a whole number in ", lo, "..", hi));
  }
  *out = v;
  return absl::OkStatus();
}

}  // namespace

bool ReflectionServed(const Flags& flags, bool socket_private) {
  return flags.reflection == "on" || (flags.reflection == "auto" && flags.listen.empty() && socket_private);
}

bool SocketIsPrivate(const std::string& socket_path) {
  struct stat st;
  return stat(DirOf(socket_path).c_str(), &st) == 0 && (st.st_mode & 077) == 0;
}

bool IsLoopbackListen(const std::string& listen) {
  const std::string host = listen.substr(0, listen.rfind(':'));
  return host == "localhost" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

std::string Usage() {
  return "usage: kjitd [--socket PATH] [--listen HOST:PORT] [--metrics-listen IP:PORT] [--cache-dir DIR]\n"
         "             [--arch sm_XX[,sm_YY]] [--log-level error|warn|info|debug] [--ring-spin-us N]\n"
         "             [--launch-timeout-ms N]\n"
         "             [--allow-tcp-system-shm] [--max-request-bytes N] [--max-regions N] [--max-sessions N]\n"
         "             [--max-rings N] [--max-system-shm-bytes N] [--max-staging-bytes N]\n"
         "             [--max-grpc-memory-bytes N]\n"
         "             [--token-file PATH] [--reflection auto|on|off]\n"
         "             [--enable-fault-injection] [--help]\n"
         "  --socket     Unix socket (default " + DefaultSocketPath() + ")\n"
         "  --listen     also serve TCP on HOST:PORT (e.g. 127.0.0.1:8001); off unless given\n"
         "  --metrics-listen  Prometheus text at http://IP:PORT/metrics (e.g. 127.0.0.1:8002; an IPv4\n"
         "               address, [IPv6] or localhost); off unless given; a port in use is an error\n"
         "  --cache-dir  cubin cache directory (default $KJIT_CACHE_DIR, else $XDG_CACHE_HOME/kjit,\n"
         "               else ~/.cache/kjit; cap it with $KJIT_CACHE_MAX_BYTES)\n"
         "  --arch       extra archs to compile at startup besides the GPUs' own (e.g. sm_120,sm_90)\n"
         "  --log-level  default info\n"
         "  --ring-spin-us  how long a launch ring's poller thread spins for the next request before\n"
         "               it sleeps (default 200; a request that finds it asleep pays a futex wake-up;\n"
         "               spinning holds a CPU core per ring)\n"
         "  --launch-timeout-ms  how long a synchronous launch may wait (default 10000): for its\n"
         "               kjit_wait_event (then it fails alone, DEADLINE_EXCEEDED), and for the GPU. A GPU\n"
         "               whose stream is still busy then (behind an asynchronous launch's kjit_wait_event\n"
         "               that has not completed) refuses launches, UNAVAILABLE, until it drains\n"
         "  --allow-tcp-system-shm  let TCP clients register system shared memory (off: kjitd cannot\n"
         "               tell which user a TCP client is, and would open any object its own user may)\n"
         "  --max-request-bytes  largest gRPC message, and launch-ring request or response, either way\n"
         "               (default 134217728; put larger tensors in shared memory regions); also what a\n"
         "               ModelInfer's typed contents may take once parsed (the other methods'\n"
         "               requests: at most 1 MiB)\n"
         "  --max-regions   registered regions and events together (default 16384)\n"
         "  --max-sessions  open sessions (default 256)\n"
         "  --max-rings     launch rings (default 64; each has a poller thread)\n"
         "  --max-system-shm-bytes  bytes of system shared memory registered at once, all clients\n"
         "               together (default 68719476736; each region is mapped while registered)\n"
         "               One user (a Unix uid; all TCP clients count as one) may hold three quarters of\n"
         "               each of --max-regions, --max-sessions, --max-rings and --max-system-shm-bytes,\n"
         "               and of the descriptors left for the Unix socket's connections; the rest is kept\n"
         "               for other users\n"
         "  --max-staging-bytes  bytes of a launch's tensors in system memory (its inputs, and its\n"
         "               outputs' capacities) that kjitd stages through page-locked host memory and the\n"
         "               GPU (default 8589934592; more is RESOURCE_EXHAUSTED: put large tensors in CUDA\n"
         "               shared memory)\n"
         "  --max-grpc-memory-bytes  memory gRPC may hold for every client's calls together (requests\n"
         "               being received and parsed, answers being sent; default the larger of 2 GiB and\n"
         "               4 x --max-request-bytes, at least --max-request-bytes). Past it gRPC refuses\n"
         "               calls, RESOURCE_EXHAUSTED, and may close a connection: many large requests with\n"
         "               tensors inline at once no longer take kjitd's memory without bound\n"
         "  --token-file  every call over TCP must carry this file's token as gRPC metadata kjit-token\n"
         "               (clients: KJIT_TOKEN_FILE); the file must be readable by its owner only (chmod 600),\n"
         "               one line of at least 16 characters. The Unix socket needs no token, and the health\n"
         "               service (and reflection, where served) stay open for probes\n"
         "  --reflection  gRPC server reflection (grpcurl without .proto files), whose requests gRPC\n"
         "               parses whole (up to --max-request-bytes) without the token: auto (the default)\n"
         "               serves it only where kjitd's own user alone can call (no --listen, and the\n"
         "               socket's directory closed to its group and others); on serves every client;\n"
         "               off none\n"
         "  --enable-fault-injection  TEST ONLY: serve the model kjit_fault_inject, whose launch writes to\n"
         "               an invalid address and so poisons the GPU context (kjitd then exits 1)\n"
         "Without a CUDA driver or GPU kjitd runs compile-only: it fills the cache for --arch and\n"
         "answers ModelInfer with FAILED_PRECONDITION.\n";
}

StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_value = false;
    if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    if (arg == "--help" || arg == "-h" || arg == "--allow-tcp-system-shm" || arg == "--enable-fault-injection") {
      if (has_value) return absl::InvalidArgumentError(absl::StrCat(arg, " takes no value"));
      (arg == "--allow-tcp-system-shm" ? f.allow_tcp_system_shm
       : arg == "--enable-fault-injection" ? f.enable_fault_injection : f.help) = true;
      continue;
    }
    if (arg != "--socket" && arg != "--listen" && arg != "--metrics-listen" && arg != "--cache-dir" && arg != "--arch" &&
        arg != "--log-level" && arg != "--ring-spin-us" && arg != "--launch-timeout-ms" && arg != "--max-request-bytes" &&
        arg != "--max-regions" && arg != "--max-sessions" && arg != "--max-rings" && arg != "--token-file" &&
        arg != "--max-system-shm-bytes" && arg != "--max-staging-bytes" && arg != "--reflection" &&
        arg != "--max-grpc-memory-bytes") {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", argv[i], "'\n", Usage()));
    }
    if (!has_value) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value"));
      value = argv[++i];
    }
    if (arg == "--socket") f.socket = value;
    if (arg == "--listen") {
      KJIT_RETURN_IF_ERROR(CheckListen(arg, value, "127.0.0.1:8001"));
      f.listen = value;
    }
    if (arg == "--metrics-listen") {
      KJIT_ASSIGN_OR_RETURN(f.metrics_listen, CheckMetricsListen(value));
    }
    if (arg == "--cache-dir") f.cache_dir = value;
    if (arg == "--token-file") {
      if (value.empty()) return absl::InvalidArgumentError("--token-file needs a path");
      f.token_file = value;
    }
    if (arg == "--log-level") {
      if (value != "error" && value != "warn" && value != "info" && value != "debug") {
        return absl::InvalidArgumentError(absl::StrCat("--log-level: unknown level '", value, "'"));
      }
      f.log_level = value;
    }
    if (arg == "--reflection") {
      if (value != "auto" && value != "on" && value != "off") {
        return absl::InvalidArgumentError(absl::StrCat("--reflection: '", value, "' is not auto, on or off"));
      }
      f.reflection = value;
    }
    if (arg == "--ring-spin-us") KJIT_RETURN_IF_ERROR(Count(arg, value, 0, 10'000'000, &f.ring_spin_us));
    if (arg == "--launch-timeout-ms") KJIT_RETURN_IF_ERROR(Count(arg, value, 1, 3'600'000, &f.launch_timeout_ms));
    // gRPC takes an int; below 64 KiB even a small verify request would not fit.
    if (arg == "--max-request-bytes") KJIT_RETURN_IF_ERROR(Count(arg, value, 65536, INT32_MAX, &f.max_request_bytes));
    if (arg == "--max-regions") KJIT_RETURN_IF_ERROR(Count(arg, value, 1, 1'000'000, &f.max_regions));
    if (arg == "--max-sessions") KJIT_RETURN_IF_ERROR(Count(arg, value, 1, 100'000, &f.max_sessions));
    if (arg == "--max-rings") KJIT_RETURN_IF_ERROR(Count(arg, value, 1, 10'000, &f.max_rings));
    if (arg == "--max-system-shm-bytes") {
      KJIT_RETURN_IF_ERROR(Count(arg, value, 4096, int64_t{1} << 46, &f.max_system_shm_bytes));
    }
    if (arg == "--max-staging-bytes") {
      KJIT_RETURN_IF_ERROR(Count(arg, value, 4096, int64_t{1} << 46, &f.max_staging_bytes));
    }
    if (arg == "--max-grpc-memory-bytes") {
      KJIT_RETURN_IF_ERROR(Count(arg, value, int64_t{64} << 20, int64_t{1} << 46, &f.max_grpc_memory_bytes));
    }
    if (arg == "--arch") {
      for (absl::string_view piece : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        const std::string a(piece);
        if (Status s = nvrtc::ValidateArch(a); !s.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("--arch: ", s.message()));
        }
        f.archs.push_back(a);
      }
    }
  }
  if (f.socket.empty()) f.socket = DefaultSocketPath();
  if (f.max_grpc_memory_bytes != 0 && f.max_grpc_memory_bytes < f.max_request_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("--max-grpc-memory-bytes ", f.max_grpc_memory_bytes,
                                                   " is below --max-request-bytes ", f.max_request_bytes,
                                                   ": a request of the largest size would not fit"));
  }
  return f;
}

int64_t GrpcMemoryBytes(const Flags& f) {
  if (f.max_grpc_memory_bytes != 0) return f.max_grpc_memory_bytes;
  return std::max<int64_t>(int64_t{2} << 30, 4 * f.max_request_bytes);
}

std::string DefaultSocketPath() {
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg != '\0') {
    return absl::StrCat(xdg, "/kjit/kjitd.sock");
  }
  if (UsableDir("/run/kjit")) return "/run/kjit/kjitd.sock";
  return absl::StrCat("/tmp/kjit-", getuid(), "/kjitd.sock");
}

Status PrepareSocketPath(const std::string& path) {
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path too long (", path.size(), " bytes): ", path));
  }
  const std::string dir = DirOf(path);
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) {
    // Only the last component is ours to create; it gets 0700.
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::FailedPreconditionError(absl::StrCat("cannot create ", dir, ": ", std::strerror(errno)));
    }
    if (lstat(dir.c_str(), &st) != 0) {
      return absl::FailedPreconditionError(absl::StrCat("cannot stat ", dir, ": ", std::strerror(errno)));
    }
  }
  // A symbolic link another user owns could later be pointed at that user's own listener.
  if (S_ISLNK(st.st_mode)) {
    if (st.st_uid != getuid() && st.st_uid != 0) {
      return absl::FailedPreconditionError(absl::StrCat(dir, " is a symbolic link owned by another user (uid ",
                                                        st.st_uid, "): remove it or choose another --socket"));
    }
    if (stat(dir.c_str(), &st) != 0) {
      return absl::FailedPreconditionError(absl::StrCat("cannot stat ", dir, ": ", std::strerror(errno)));
    }
  }
  if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(dir, " is not a directory"));
  if (st.st_uid != getuid() && st.st_uid != 0) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " belongs to another user (uid ", st.st_uid, ")"));
  }
  // Others who may write the directory could replace the socket (the sticky bit stops them).
  if ((st.st_mode & S_IWOTH) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " is writable by every user: use a directory of yours"));
  }
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(path, " exists and is not a socket"));
    }
    // A daemon that still answers owns it; otherwise it is a dead daemon's leftover.
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd >= 0) {
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
      const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
      close(fd);
      if (live) return absl::FailedPreconditionError(absl::StrCat("another daemon serves ", path));
    }
    unlink(path.c_str());
  }
  return absl::OkStatus();
}

}  // namespace kjit::server
