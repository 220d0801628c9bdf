#include "bench/kernel_bench/timeline.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernel_sources/mla_verify/timeline.cuh"

namespace kjit::bench {
namespace {

struct Global {
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
};

StatusOr<Global> FindGlobal(const driver::Api& api, CUfunction fn, const char* name) {
  CUmodule mod = nullptr;
  KJIT_RETURN_IF_ERROR(driver::Check(api.cuFuncGetModule(&mod, fn), "timeline: module of the kernel"));
  Global g;
  if (api.cuModuleGetGlobal(&g.ptr, &g.bytes, mod, name) != CUDA_SUCCESS)
    return absl::FailedPreconditionError(
        absl::StrCat("timeline: the kernels have no ", name, "; compile them with -DKJIT_TIMELINE=1"));
  return g;
}

double Median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

std::string Us(double v) { return v < 0 ? "-" : absl::StrFormat("%.2f", v); }

const char* const kPointNames[] = {"entry",           "request loaded", "tile 0's copies issued", "Q landed",
                                   "first S",         "loop end",       "partial O staged",       "exit"};

}  // namespace

StatusOr<std::string> MeasureTimeline(const kernels::KernelTable& table, const kernels::MlaVerifyPlan& plan,
                                      CUstream stream, int launches, double sm_hz,
                                      const std::function<Status(int)>& launch) {
  using namespace mla;
  if (!plan.tree_kernel.empty())
    return absl::UnimplementedError("timeline: the launch sequence has a tree launch of its own (fp8 numerics on "
                                    "e4m3 MMAs), whose stamps would overwrite the prefix slab's; not measured");
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  KJIT_ASSIGN_OR_RETURN(CUfunction split, table.Function(plan.family, plan.specialization, plan.main_kernel));
  KJIT_ASSIGN_OR_RETURN(CUfunction combine, table.Function(plan.family, plan.specialization, plan.combine_kernel));
  KJIT_ASSIGN_OR_RETURN(Global gs, FindGlobal(*api, split, "kjit_timeline_split"));
  KJIT_ASSIGN_OR_RETURN(Global gc, FindGlobal(*api, combine, "kjit_timeline_combine"));
  const long split_ctas = std::min<long>(kTimelineCtas, static_cast<long>(plan.main.grid[0]) * plan.main.grid[1] *
                                                            plan.main.grid[2]);
  const long combine_ctas =
      std::min<long>(kTimelineCombineCtas, static_cast<long>(plan.combine.grid[0]) * plan.combine.grid[1]);
  const long slab = static_cast<long>(plan.main.grid[0]) * plan.main.grid[1];  // CTAs per split (z)
  std::vector<uint64_t> s(split_ctas * kTimelinePoints), c(combine_ctas * kCombinePoints);

  // Per point and kind (0 prefix, 1 tree): the per-launch medians over CTAs.
  std::vector<double> per_point[kTlExit + 1][2], last_exit, c_entry, c_waited, c_exit;
  std::set<uint64_t> sms;
  for (int r = 0; r < launches; ++r) {
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemsetD8Async(gs.ptr, 0, gs.bytes, stream), "timeline: clear"));
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemsetD8Async(gc.ptr, 0, gc.bytes, stream), "timeline: clear"));
    KJIT_RETURN_IF_ERROR(launch(r));
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamSynchronize(stream), "timeline: launch"));
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemcpyDtoH(s.data(), gs.ptr, s.size() * 8), "timeline: read"));
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemcpyDtoH(c.data(), gc.ptr, c.size() * 8), "timeline: read"));
    // A point's time: the CTA's entry on the global timer, plus SM cycles since its entry.
    uint64_t t0 = UINT64_MAX;
    for (long i = 0; i < split_ctas; ++i) {
      const uint64_t e = s[i * kTimelinePoints + kTlEntryGlobal];
      if (e != 0) t0 = std::min(t0, e);
    }
    if (t0 == UINT64_MAX) return absl::InternalError("timeline: no split CTA recorded its entry");
    auto us = [&](const uint64_t* row, int entry_global, int entry, int point) {
      const double placed = static_cast<double>(row[entry_global]) - static_cast<double>(t0);
      return (placed + static_cast<double>(row[point] - row[entry]) / sm_hz * 1e9) / 1e3;
    };
    std::vector<double> pts[kTlExit + 1][2];
    double last = 0;
    for (long i = 0; i < split_ctas; ++i) {
      const uint64_t* row = &s[i * kTimelinePoints];
      if (row[kTlEntryGlobal] == 0) continue;
      sms.insert(row[kTlSm]);
      const int kind = i / slab == static_cast<long>(plan.main.grid[2]) - 1 ? 1 : 0;  // the last slab: tree
      for (int pt = 0; pt <= kTlExit; ++pt) {
        if (row[pt] != 0) pts[pt][kind].push_back(us(row, kTlEntryGlobal, kTlEntry, pt));
      }
      if (row[kTlExit] != 0) last = std::max(last, us(row, kTlEntryGlobal, kTlEntry, kTlExit));
    }
    for (int pt = 0; pt <= kTlExit; ++pt)
      for (int k = 0; k < 2; ++k)
        if (!pts[pt][k].empty()) per_point[pt][k].push_back(Median(pts[pt][k]));
    last_exit.push_back(last);
    std::vector<double> ce, cw;
    double cx = 0;
    for (long i = 0; i < combine_ctas; ++i) {
      const uint64_t* row = &c[i * kCombinePoints];
      if (row[kTlcEntryGlobal] == 0) continue;
      ce.push_back(us(row, kTlcEntryGlobal, kTlcEntry, kTlcEntry));
      if (row[kTlcWaited] != 0) cw.push_back(us(row, kTlcEntryGlobal, kTlcEntry, kTlcWaited));
      if (row[kTlcExit] != 0) cx = std::max(cx, us(row, kTlcEntryGlobal, kTlcEntry, kTlcExit));
    }
    if (!ce.empty()) c_entry.push_back(Median(ce));
    if (!cw.empty()) c_waited.push_back(Median(cw));
    c_exit.push_back(cx);
  }
  std::string md = absl::StrFormat(
      "Timeline: %ld split CTAs (%u per split x %u slabs, the last the tree) on %zu SMs, %ld combine CTAs; "
      "us from the first split CTA's entry (each CTA placed by its entry on the global timer, 256 ns steps, and "
      "timed within by its SM's cycles at %.0f MHz), medians over CTAs and %d launches.\n\n"
      "| point | prefix CTAs | tree CTAs |\n|---|---|---|\n",
      split_ctas, static_cast<unsigned>(slab), plan.main.grid[2], sms.size(), combine_ctas, sm_hz / 1e6, launches);
  for (int pt = 0; pt <= kTlExit; ++pt) {
    if (per_point[pt][0].empty() && per_point[pt][1].empty()) continue;  // not stamped by this tile
    absl::StrAppend(&md, "| ", kPointNames[pt], " | ", Us(Median(per_point[pt][0])), " | ",
                    Us(Median(per_point[pt][1])), " |\n");
  }
  absl::StrAppend(&md, "| last split CTA's exit | ", Us(Median(last_exit)), " | |\n");
  absl::StrAppend(&md, "| combine: entry (median CTA) | ", Us(Median(c_entry)), " | |\n");
  absl::StrAppend(&md, "| combine: past its wait (median CTA) | ", Us(Median(c_waited)), " | |\n");
  absl::StrAppend(&md, "| combine: last exit | ", Us(Median(c_exit)), " | |\n");
  return md;
}

}  // namespace kjit::bench
