// A captured launch sequence (RAII over CUgraph + CUgraphExec), replayed to time what SGLang's
// CUDA-graph runner sees: no host enqueue cost between the kernels of one verify step.
#pragma once

#include <cuda.h>

#include <functional>

#include "runtime/common/status.h"
#include "runtime/driver/cuda_driver.h"

namespace kjit::bench {

class CapturedGraph {
 public:
  static StatusOr<CapturedGraph> Capture(CUstream stream, const std::function<Status()>& enqueue);
  CapturedGraph(CapturedGraph&& o) noexcept : graph_(o.graph_), exec_(o.exec_) { o.graph_ = nullptr; o.exec_ = nullptr; }
  CapturedGraph& operator=(CapturedGraph&&) = delete;
  CapturedGraph(const CapturedGraph&) = delete;
  ~CapturedGraph();
  Status Launch(CUstream stream) const;

 private:
  CapturedGraph() = default;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

}  // namespace kjit::bench
