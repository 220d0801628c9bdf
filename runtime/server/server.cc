#include "runtime/server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/launch/reaper.h"
#include "runtime/server/grpc_queues.h"
#include "runtime/server/health_service.h"
#include "runtime/server/inference_service.h"
#include "runtime/server/kernel_service.h"
#include "runtime/server/library_logs.h"
#include "runtime/server/metrics_endpoint.h"
#include "runtime/server/token.h"
#include "runtime/server/unix_listener.h"
#include "runtime/common/log.h"

namespace kjit::server {
namespace {

// What SIGUSR1 logs: devices, in-flight asynchronous launches, the cache.
std::string DescribeState(Daemon& d) {
  std::string out = absl::StrCat(d.ready.load() ? "ready" : "not ready", ", ", d.devices.size(), " GPU(s)");
  for (auto& dev : d.devices) {
    std::lock_guard<std::mutex> lock(dev->mu());
    absl::StrAppend(&out, "; GPU ", dev->info().ordinal, " (", dev->info().arch, "): ", dev->in_flight().size(),
                    " asynchronous launches in flight");
    if (dev->blocked()) absl::StrAppend(&out, ", refusing launches until its stream drains (", dev->blocked_reason(), ")");
  }
  if (d.cache) {
    const cache::Stats s = d.cache->stats();
    absl::StrAppend(&out, "; cache ", d.cache->dir(), ": ", s.hits_memory + s.hits_disk, " hits, ", s.misses,
                    " misses, ", s.compiles, " compiles");
  }
  return out;
}

// Takes gRPC's reflection plugin out of a server builder: its service is then not registered, and its
// calls reach the generic service, which answers them by name (ReflectionServed says why).
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    std::erase_if(*plugins, [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
      return p->name() == "proto_server_reflection";
    });
  }
};

// Takes the blocked signals until SIGINT or SIGTERM (returned): SIGUSR1 logs the daemon's state,
// SIGHUP and SIGUSR2 are logged and ignored.
// Whether `sig` (one of the blocked set) asks kjitd to stop; the others are answered here.
bool IsStop(int sig, Daemon& d) {
  if (sig == SIGINT || sig == SIGTERM) return true;
  if (sig == SIGUSR1) {
    Log(LogLevel::kInfo, absl::StrCat("SIGUSR1: ", DescribeState(d)));
  } else {
    Log(LogLevel::kInfo, absl::StrCat(sig == SIGHUP ? "SIGHUP" : "SIGUSR2",
                                      ": ignored (kjitd logs to stderr and has no configuration to reload)"));
  }
  return false;
}

int WaitForStop(const sigset_t& signals, Daemon& d) {
  for (;;) {
    int sig = 0;
    sigwait(&signals, &sig);
    if (IsStop(sig, d)) return sig;
  }
}

// Asynchronous launches may still be queued (one may wait on a client's event): they get a bounded
// time to finish, so that their regions stay mapped while they run and the clients' signal events
// fire, before the contexts go away.
void DrainAsyncLaunches(Daemon& d) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (auto& dev : d.devices) {
    std::lock_guard<std::mutex> lock(dev->mu());
    (void)dev->context().MakeCurrent();
    dev->in_flight().Reap();
    while (dev->in_flight().size() > 0 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      dev->in_flight().Reap();
    }
  }
}

// --listen's port, with a warning where the address or the token leaves TCP open wider than asked.
void AddTcpPort(const Flags& flags, const std::string& token, grpc::ServerBuilder* builder, int* port) {
  if (flags.listen.empty()) {
    if (!token.empty()) Log(LogLevel::kWarn, "--token-file without --listen: the token guards TCP only, and TCP is off");
    return;
  }
  if (!IsLoopbackListen(flags.listen) && token.empty()) {
    Log(LogLevel::kWarn, absl::StrCat("--listen ", flags.listen, " is not a loopback address: every host that "
                                      "reaches it may launch kernels on this node's GPUs (a --token-file is "
                                      "advised)"));
  }
  builder->AddListeningPort(flags.listen, grpc::InsecureServerCredentials(), port);
}

// Every connection and every registered system shared memory object holds a descriptor: the soft
// limit goes up to the hard one (commonly 1024 against 524288).
void RaiseDescriptorLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= r.rlim_max) return;
  const rlim_t was = r.rlim_cur;
  r.rlim_cur = r.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &r) != 0)
    Log(LogLevel::kWarn, absl::StrCat("cannot raise RLIMIT_NOFILE from ", was, ": ", std::strerror(errno)));
}

// The daemon's bounds from its flags: registered regions, sessions, rings, request bytes, the
// ring's spin and the launch timeout.
void ApplyLimits(const Flags& flags, Daemon* d) {
  d->regions.SetMaxEntries(static_cast<size_t>(flags.max_regions));
  d->regions.SetMaxSystemBytes(static_cast<uint64_t>(flags.max_system_shm_bytes));
  d->sessions.SetMaxSessions(static_cast<size_t>(flags.max_sessions));
  d->rings.SetMaxRings(static_cast<size_t>(flags.max_rings));
  d->rings.SetMaxMessageBytes(static_cast<uint64_t>(flags.max_request_bytes));
  d->rings.SetSpin(std::chrono::microseconds(flags.ring_spin_us));
  d->launcher.SetTimeout(std::chrono::milliseconds(flags.launch_timeout_ms));
  d->launcher.SetMaxStagingBytes(static_cast<uint64_t>(flags.max_staging_bytes));
}

// The synchronous calls other than sessions that may run at once: HealthService::kMaxWatches Watch
// streams, the pollers, and others (compiles waiting for NVRTC among them).
constexpr int kSyncThreadsBeyondSessions = HealthService::kMaxWatches + 128;

// No new connection (those open finish their calls within `grace`), then the server, its
// completion-queue threads and the launch rings stop.
void StopServing(UnixListener& unix_listener, grpc::Server& server, CompletionQueueThreads& queues,
                 std::chrono::seconds grace, Daemon& d) {
  unix_listener.Stop();
  server.Shutdown(std::chrono::system_clock::now() + grace);
  queues.Shutdown();
  server.Wait();
  d.rings.Clear();
}

}  // namespace

Status RunDaemon(const Flags& flags) {
  // Stop signals are taken synchronously by this thread (sigwait), never by gRPC's threads.
  // SIGHUP, SIGUSR1 and SIGUSR2 would kill the process by default: they are taken here too.
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&stop, sig);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Daemon d;
  d.flags = flags;
  if (!flags.token_file.empty()) {
    KJIT_ASSIGN_OR_RETURN(d.tcp_token, ReadTokenFile(flags.token_file));
  }
  SetLogLevel(flags.log_level);
  if (flags.enable_fault_injection) {
    Log(LogLevel::kWarn, "--enable-fault-injection: any client may make this daemon fault (model kjit_fault_inject); "
                         "for tests only");
  }
  RouteLibraryLogs();
  ApplyLimits(flags, &d);
  RaiseDescriptorLimit();
  std::unique_ptr<MetricsEndpoint> metrics;  // destroyed before d: no scrape outlives the daemon's state
  if (!flags.metrics_listen.empty()) {
    if (!IsLoopbackListen(flags.metrics_listen)) {
      Log(LogLevel::kWarn, absl::StrCat("--metrics-listen ", flags.metrics_listen, " is not a loopback address: "
                                        "every host that reaches it may read this daemon's metrics"));
    }
    KJIT_ASSIGN_OR_RETURN(metrics, MetricsEndpoint::Start(flags.metrics_listen, &d));
  }
  KJIT_RETURN_IF_ERROR(PrepareSocketPath(flags.socket));
  // The socket's group may connect too (0660 in a directory of ours).
  KJIT_ASSIGN_OR_RETURN(std::unique_ptr<UnixListener> unix_listener, UnixListener::Bind(flags.socket, 0660));

  grpc::reflection::InitProtoReflectionServerBuilderPlugin();  // the library also registers it when loaded
  const bool socket_private = SocketIsPrivate(flags.socket);
  const bool reflection = ReflectionServed(flags, socket_private);
  if (reflection && (!flags.listen.empty() || !socket_private)) {
    Log(LogLevel::kWarn, "--reflection on: clients other than kjitd's own user may send gRPC reflection requests of "
                         "up to --max-request-bytes, which gRPC parses without the token");
  }
  InferenceService inference(&d);
  inference.SetMaxRequestBytes(static_cast<uint64_t>(flags.max_request_bytes));
  KernelService kernel(&d);
  HealthService health;  // NOT_SERVING until the kernels are loaded
  d.rings.SetHandler([&inference](const inference::ModelInferRequest& req, const ipc::Scope& session,
                                   inference::ModelInferResponse* resp) {
    return inference.Infer(req, session, resp, Transport::kRing);
  });
  grpc::ServerBuilder builder;
  if (!reflection) builder.SetOption(std::make_unique<WithoutReflection>());
  builder.SetMaxReceiveMessageSize(static_cast<int>(flags.max_request_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(flags.max_request_bytes));
  // The synchronous methods' thread pool. MAX must stay above MIN: at MAX == MIN gRPC 1.51 starts a
  // thread per call. (With the completion-queue threads in the server these threads do not poll the socket.)
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 2);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 4);
  // Each synchronous call holds a thread while it runs, and a call that waits (a session, a Watch,
  // a compile queued for NVRTC) holds it that long: gRPC would start a thread for every one. At
  // most kSyncThreadsBeyondSessions more than the sessions may run; past that a call is answered
  // RESOURCE_EXHAUSTED ("Server Threadpool Exhausted") at once.
  grpc::ResourceQuota quota("kjitd");
  quota.SetMaxThreads(static_cast<int>(flags.max_sessions) + kSyncThreadsBeyondSessions);
  // And the memory of every call together: gRPC buffers each request whole before its handler, so
  // many connections sending large requests at once held gigabytes (100 of 120 MiB: 5.5 GB).
  quota.Resize(static_cast<size_t>(GrpcMemoryBytes(flags)));
  builder.SetResourceQuota(quota);
  // A port another daemon holds is an error, not shared (gRPC's default SO_REUSEPORT would split
  // the clients between the two).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // A connection with no call for 10 minutes is closed (GOAWAY; a client reconnects on its next
  // call), so that forgotten ones do not hold descriptors for good.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, 10 * 60 * 1000);
  int tcp_port = 0;
  AddTcpPort(flags, d.tcp_token, &builder, &tcp_port);
  builder.RegisterService(&inference);
  builder.RegisterService(&kernel);
  builder.RegisterService(&health);
  // One completion-queue thread per GPU (ServerLive, ModelInfer), at least one. The enumeration is also
  // StartDaemon's.
  const auto gpus = driver::Devices();
  CompletionQueueThreads queues(&inference, &builder, gpus.ok() ? static_cast<int>(gpus->size()) : 1);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || (!flags.listen.empty() && tcp_port == 0)) {
    if (server != nullptr) server->Shutdown();
    unix_listener.reset();
    unlink(flags.socket.c_str());
    return absl::UnavailableError(absl::StrCat("cannot listen on ", flags.listen.empty() ? "gRPC's server" : flags.listen));
  }
  queues.Start();
  unix_listener->Serve(server.get());
  const std::string tcp = absl::StrCat(" and ", flags.listen, d.tcp_token.empty() ? "" : " (token required)");
  Log(LogLevel::kInfo, absl::StrCat("listening on unix://", flags.socket, flags.listen.empty() ? "" : tcp));

  // Startup (compile and load) happens while already answering health, so supervisors can watch.
  // The stop signals stay blocked until WaitForStop, so the compiles look for one themselves: a cold
  // cache's catalog takes minutes, and a supervisor's SIGTERM used to wait for all of it.
  std::atomic<int> startup_signal{0};
  auto stop_requested = [&stop, &startup_signal, &d] {  // from the compile threads, between compiles
    if (startup_signal.load() != 0) return true;
    siginfo_t info;
    const timespec now{0, 0};
    for (int sig; (sig = sigtimedwait(&stop, &info, &now)) > 0;) {
      if (IsStop(sig, d)) {
        startup_signal = sig;
        return true;
      }
    }
    return false;
  };
  if (Status s = StartDaemon(&d, gpus, stop_requested); !s.ok()) {
    health.Shutdown();
    StopServing(*unix_listener, *server, queues, std::chrono::seconds(1), d);
    unlink(flags.socket.c_str());
    if (startup_signal.load() != 0) {
      Log(LogLevel::kInfo, absl::StrCat("signal ", startup_signal.load(), " during startup: stopped"));
      return absl::OkStatus();
    }
    return s;
  }
  health.SetServing(true);
  Log(LogLevel::kInfo, absl::StrCat("ready: ", d.devices.size(), " GPU(s)",
                                    d.devices.empty() ? absl::StrCat(" (", d.compile_only_reason, ")") : ""));
  std::vector<launch::DeviceRuntime*> devices;
  for (auto& dev : d.devices) devices.push_back(dev.get());
  auto reaper = std::make_unique<launch::IdleReaper>(std::move(devices), std::chrono::milliseconds(50));

  const int sig = WaitForStop(stop, d);
  reaper.reset();  // DrainAsyncLaunches below waits for what is left
  Log(LogLevel::kInfo, absl::StrCat("signal ", sig, ": stopping (finishing in-flight requests)"));
  health.Shutdown();  // NOT_SERVING, and every Watch ends
  d.ready = false;
  d.sessions.CancelAll();
  StopServing(*unix_listener, *server, queues, std::chrono::seconds(10), d);
  d.regions.Clear();
  DrainAsyncLaunches(d);
  unlink(flags.socket.c_str());
  if (d.poisoned) return absl::InternalError("stopped after a CUDA error made a GPU context unusable");
  Log(LogLevel::kInfo, "stopped");
  return absl::OkStatus();
}

}  // namespace kjit::server
