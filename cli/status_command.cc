// `kjit status [--target T] [--json] [--health]`: what a running kjitd holds, from its RPCs:
// grpc.health.v1 Check, KernelService DaemonStatus / ListDevices / ListKernels, and the Triton
// ModelStatistics (launch counts and mean latencies per model).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/daemon_client.h"
#include "cli/json.h"
#include "cli/output.h"

namespace kjit::cli {

Flag TargetFlag() {
  return {"target", "T", "the daemon: unix:///path or host:port (default $KJIT_TARGET, else the default socket)"};
}
Flag DeadlineFlag() { return {"deadline-ms", "N", "give up on each call after N ms (default 5000)"}; }

namespace {

const Command kStatus{
    "kjit status [flags]",
    "Show a running kjitd: health, GPUs and their archs, loaded kernels, sessions, regions, events,\n"
    "rings, and launch counts and mean latencies per model. With --health, print only the health\n"
    "status and exit 0 when SERVING, 1 otherwise (a probe for supervisors and Kubernetes).",
    {TargetFlag(), DeadlineFlag(), {"health", "", "only the health status; exit status 0 when SERVING"},
     {"json", "", "print JSON instead of text"}}};

std::string HealthName(grpc::health::v1::HealthCheckResponse::ServingStatus s) {
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(s);
}

struct Gathered {
  std::string health;
  v1::DaemonStatusResponse status;
  v1::ListDevicesResponse devices;
  v1::ListKernelsResponse kernels;
  inference::ModelStatisticsResponse stats;
};

// Every RPC of the view; devices and kernels are answered only once the daemon is ready.
Status Gather(DaemonClient& c, Gathered* g) {
  grpc::health::v1::HealthCheckResponse health;
  KJIT_RETURN_IF_ERROR(c.Check(c.health().Check(c.Context().get(), {}, &health), "Health.Check", true));
  g->health = HealthName(health.status());
  KJIT_RETURN_IF_ERROR(c.Check(c.kernels().DaemonStatus(c.Context().get(), {}, &g->status), "DaemonStatus"));
  if (g->status.ready()) {
    KJIT_RETURN_IF_ERROR(c.Check(c.kernels().ListDevices(c.Context().get(), {}, &g->devices), "ListDevices"));
    KJIT_RETURN_IF_ERROR(c.Check(c.kernels().ListKernels(c.Context().get(), {}, &g->kernels), "ListKernels"));
  }
  return c.Check(c.inference().ModelStatistics(c.Context().get(), {}, &g->stats), "ModelStatistics");
}

double MeanUs(uint64_t ns, uint64_t count) { return count == 0 ? 0.0 : static_cast<double>(ns) / count / 1e3; }

Json StatusJson(const DaemonClient& c, const Gathered& g) {
  const v1::DaemonStatusResponse& s = g.status;
  Json gpus = Json::array();
  for (const auto& d : g.devices.devices()) {
    bool healthy = false, blocked = false;
    for (const auto& h : s.gpus()) {
      healthy |= h.ordinal() == d.ordinal() && h.healthy();
      blocked |= h.ordinal() == d.ordinal() && h.blocked();
    }
    gpus.push_back({{"ordinal", d.ordinal()}, {"name", d.name()}, {"uuid", d.uuid()}, {"arch", d.arch()},
                    {"sm_count", d.sm_count()}, {"kernels_loaded", d.kernels_loaded()}, {"healthy", healthy},
                    {"blocked", blocked}});
  }
  Json kernels = Json::array();
  for (const auto& k : g.kernels.kernels()) {
    kernels.push_back({{"family", k.family()}, {"specialization", k.specialization()},
                       {"archs_compiled", std::vector<std::string>(k.archs_compiled().begin(), k.archs_compiled().end())},
                       {"devices_loaded", std::vector<int>(k.devices_loaded().begin(), k.devices_loaded().end())}});
  }
  Json models = Json::array();
  for (const auto& m : g.stats.model_stats()) {
    const auto& is = m.inference_stats();
    models.push_back({{"model", m.name()},
                      {"success", is.success().count()},
                      {"fail", is.fail().count()},
                      {"mean_success_us", MeanUs(is.success().ns(), is.success().count())},
                      {"mean_compute_us", MeanUs(is.compute_infer().ns(), is.compute_infer().count())},
                      {"last_inference_unix_ms", m.last_inference()}});
  }
  return {{"target", c.target()},
          {"health", g.health},
          {"version", s.version()},
          {"ready", s.ready()},
          {"poisoned", s.poisoned()},
          {"compile_only_reason", s.compile_only_reason()},
          {"uptime_seconds", s.uptime_seconds()},
          {"gpus", std::move(gpus)},
          {"kernels", std::move(kernels)},
          {"sessions", s.sessions()},
          {"max_sessions", s.max_sessions()},
          {"system_regions", s.system_regions()},
          {"cuda_regions", s.cuda_regions()},
          {"events", s.events()},
          {"max_regions", s.max_regions()},
          {"rings", s.rings()},
          {"max_rings", s.max_rings()},
          {"metrics_listen", s.metrics_listen()},
          {"models", std::move(models)}};
}

void PrintText(const DaemonClient& c, const Gathered& g) {
  const v1::DaemonStatusResponse& s = g.status;
  std::printf("kjitd %s at %s: %s, up %s\n", s.version().c_str(), c.target().c_str(), g.health.c_str(),
              absl::StrFormat("%.0f s", s.uptime_seconds()).c_str());
  if (s.poisoned()) std::printf("a CUDA context became unusable: the daemon is stopping\n");
  if (!s.ready()) std::printf("starting: kernels not loaded yet\n");
  if (s.ready() && !s.compile_only_reason().empty()) {
    std::printf("%s\n", s.compile_only_reason().c_str());
  }
  if (g.devices.devices_size() > 0) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& d : g.devices.devices()) {
      bool healthy = false, blocked = false;
      for (const auto& h : s.gpus()) {
        healthy |= h.ordinal() == d.ordinal() && h.healthy();
        blocked |= h.ordinal() == d.ordinal() && h.blocked();
      }
      rows.push_back({std::to_string(d.ordinal()), d.name(), d.arch(), std::to_string(d.sm_count()), d.uuid(),
                      d.kernels_loaded() ? "yes" : "no", healthy ? "yes" : "no", blocked ? "yes" : "no"});
    }
    std::printf("\n");
    PrintTable({"gpu", "name", "arch", "SMs", "uuid", "kernels", "healthy", "blocked"}, rows);
  }
  if (g.kernels.kernels_size() > 0) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& k : g.kernels.kernels()) {
      rows.push_back({k.family() + "/" + k.specialization(), absl::StrJoin(k.archs_compiled(), ","),
                      k.devices_loaded_size() == 0 ? "-" : absl::StrJoin(k.devices_loaded(), ",")});
    }
    std::printf("\n");
    PrintTable({"kernel", "compiled for", "loaded on GPUs"}, rows);
  }
  std::printf("\nsessions %lu/%lu   regions %lu system + %lu CUDA, events %lu (%lu together at most)   rings %lu/%lu\n",
              static_cast<unsigned long>(s.sessions()), static_cast<unsigned long>(s.max_sessions()),
              static_cast<unsigned long>(s.system_regions()), static_cast<unsigned long>(s.cuda_regions()),
              static_cast<unsigned long>(s.events()), static_cast<unsigned long>(s.max_regions()),
              static_cast<unsigned long>(s.rings()), static_cast<unsigned long>(s.max_rings()));
  if (!s.metrics_listen().empty()) std::printf("metrics     http://%s/metrics\n", s.metrics_listen().c_str());
  std::vector<std::vector<std::string>> rows;
  for (const auto& m : g.stats.model_stats()) {
    const auto& is = m.inference_stats();
    rows.push_back({m.name(), std::to_string(is.success().count()), std::to_string(is.fail().count()),
                    absl::StrFormat("%.1f", MeanUs(is.success().ns(), is.success().count())),
                    absl::StrFormat("%.1f", MeanUs(is.compute_infer().ns(), is.compute_infer().count()))});
  }
  std::printf("\n");
  PrintTable({"model", "launches ok", "failed", "mean us", "mean compute us"}, rows);
}

}  // namespace

StatusOr<std::chrono::milliseconds> DeadlineOf(const Parsed& p) {
  int64_t ms = 5000;
  if (p.Has("deadline-ms") && (!absl::SimpleAtoi(p.Get("deadline-ms"), &ms) || ms <= 0 || ms > 3'600'000)) {
    return absl::InvalidArgumentError("--deadline-ms must be a whole number of milliseconds in 1..3600000");
  }
  return std::chrono::milliseconds(ms);
}

int RunStatus(int argc, char** argv, int first) {
  StatusOr<Parsed> p = Parse(kStatus, argc, argv, first);
  if (!p.ok()) return UsageError(kStatus, p.status());
  if (p->help) {
    std::fputs(HelpText(kStatus).c_str(), stdout);
    return kExitOk;
  }
  StatusOr<std::chrono::milliseconds> deadline = DeadlineOf(*p);
  if (!deadline.ok()) return UsageError(kStatus, deadline.status());
  DaemonClient c(p->Get("target"), *deadline);
  if (p->Has("health")) {
    grpc::health::v1::HealthCheckResponse health;
    const Status s = c.Check(c.health().Check(c.Context().get(), {}, &health), "Health.Check", true);
    if (!s.ok()) return Fail(s);
    const bool serving = health.status() == grpc::health::v1::HealthCheckResponse::SERVING;
    if (p->Has("json")) {
      PrintJson({{"target", c.target()}, {"health", HealthName(health.status())}, {"serving", serving}});
    } else {
      std::printf("%s\n", HealthName(health.status()).c_str());
    }
    return serving ? kExitOk : kExitFailure;
  }
  Gathered g;
  if (Status s = Gather(c, &g); !s.ok()) return Fail(s);
  if (p->Has("json")) {
    PrintJson(StatusJson(c, g));
  } else {
    PrintText(c, g);
  }
  return kExitOk;
}

}  // namespace kjit::cli
