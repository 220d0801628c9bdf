#include "bench/kernel_bench/graph.h"

namespace kjit::bench {

StatusOr<CapturedGraph> CapturedGraph::Capture(CUstream stream, const std::function<Status()>& enqueue) {
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                                     "begin capture"));
  const Status st = enqueue();
  CapturedGraph g;
  const CUresult end = api->cuStreamEndCapture(stream, &g.graph_);
  KJIT_RETURN_IF_ERROR(st);
  KJIT_RETURN_IF_ERROR(driver::Check(end, "end capture"));
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuGraphInstantiate(&g.exec_, g.graph_, 0), "instantiate graph"));
  return g;
}

CapturedGraph::~CapturedGraph() {
  auto api = driver::Get();
  if (!api.ok()) return;
  if (exec_ != nullptr) (*api)->cuGraphExecDestroy(exec_);
  if (graph_ != nullptr) (*api)->cuGraphDestroy(graph_);
}

Status CapturedGraph::Launch(CUstream stream) const {
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  return driver::Check(api->cuGraphLaunch(exec_, stream), "graph launch");
}

}  // namespace kjit::bench
