#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/common/client_text.h"
#include "runtime/ipc/sigbus_guard.h"
#include "runtime/launch/launch_state.h"

namespace kjit::launch::internal {
namespace {

using Where = Located::Where;
constexpr size_t kAlign = 256;
size_t AlignUp(size_t x) { return (std::max<size_t>(x, 1) + kAlign - 1) & ~(kAlign - 1); }

// The one check that a region or an event is on the launch's GPU.
Status SameDevice(const std::string& what, int on, int launch_device) {
  if (on == launch_device) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " is on GPU ", on, ", the launch runs on GPU ", launch_device, " (kjit_device)"));
}

StatusOr<Located> LocateOne(const ipc::RegionRegistry& regions, const TensorArg& t, const ipc::Scope& session) {
  Located l;
  l.bytes = t.desc.byte_size;
  if (t.kind == TensorArg::Kind::kHost) {
    l.host = t.host;
    return l;
  }
  const std::string where = absl::StrCat("tensor '", t.desc.name, "'");
  auto region = regions.FindRegion(t.region, session);
  if (!region.ok()) return WithContext(region.status(), where);
  const uint64_t cap = (*region)->size();
  if (!driver::RangeInside(t.offset, l.bytes, cap)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": offset ", t.offset, " + byte size ", l.bytes,
                                                   " is outside region '", ClientText(t.region), "' (", cap,
                                                   " bytes)"));
  }
  if ((*region)->kind() == ipc::RegionKind::kCuda) {
    l.where = Where::kCuda;
    l.device = (*region)->cuda->base() + t.offset;
  } else {
    l.where = Where::kShared;
    l.host = (*region)->system->data() + t.offset;
  }
  l.region = *std::move(region);
  return l;
}

// The request position of each index pointer the family declares, by schema position (-1: none).
std::vector<int> IndexPointerInputs(const LaunchState& s) {
  const std::span<const kernels::TensorSchema> schema = s.family->inputs();
  const std::span<const int> slots = s.launch->input_slots();
  std::vector<int> out(schema.size(), -1);
  for (size_t k = 0; k < schema.size(); ++k) {
    if (schema[k].index_pointer) out[k] = slots[k];
  }
  return out;
}

}  // namespace

std::string TensorWhere(const LaunchState& s, size_t input) {
  const TensorArg& t = s.request->inputs[input];
  return absl::StrCat("tensor '", t.desc.name, "' (region '", ClientText(t.region), "')");
}

Status Locate(const ipc::RegionRegistry& regions, LaunchState* s) {
  const LaunchRequest& r = *s->request;
  for (const TensorArg& t : r.inputs) {
    KJIT_ASSIGN_OR_RETURN(Located l, LocateOne(regions, t, r.session));
    s->inputs.push_back(std::move(l));
  }
  for (const TensorArg& t : r.outputs) {
    KJIT_ASSIGN_OR_RETURN(Located l, LocateOne(regions, t, r.session));
    if (s->async() && l.where != Where::kCuda) {
      return absl::InvalidArgumentError("kjit_signal_event (asynchronous launch) needs every output in a CUDA region");
    }
    s->outputs.push_back(std::move(l));
  }
  if (!s->wait_name.empty()) {
    KJIT_ASSIGN_OR_RETURN(s->wait, regions.FindEvent(s->wait_name, r.session));
  }
  if (!s->signal_name.empty()) {
    KJIT_ASSIGN_OR_RETURN(s->signal, regions.FindEvent(s->signal_name, r.session));
  }
  return absl::OkStatus();
}

Status CheckDevice(const LaunchState& s, int ordinal) {
  const LaunchRequest& r = *s.request;
  for (size_t i = 0; i < s.inputs.size() + s.outputs.size(); ++i) {
    const bool in = i < s.inputs.size();
    const Located& l = in ? s.inputs[i] : s.outputs[i - s.inputs.size()];
    const TensorArg& t = in ? r.inputs[i] : r.outputs[i - s.inputs.size()];
    if (l.where != Where::kCuda) continue;
    KJIT_RETURN_IF_ERROR(SameDevice(absl::StrCat("tensor '", t.desc.name, "': region '", ClientText(t.region), "'"),
                                    l.region->cuda->device(), ordinal));
  }
  for (const auto& ev : {s.wait, s.signal}) {
    if (ev) KJIT_RETURN_IF_ERROR(SameDevice(absl::StrCat("event '", ClientText(ev->name), "'"), ev->event->device(), ordinal));
  }
  return absl::OkStatus();
}

bool IndexPointersOnDevice(const LaunchState& s) {
  for (int i : IndexPointerInputs(s)) {
    if (i >= 0 && s.inputs[i].where == Where::kCuda) return true;
  }
  return false;
}

Status CheckIndexPointers(LaunchState* s, std::span<const uint8_t* const> device_copies) {
  const std::vector<int> which = IndexPointerInputs(*s);
  std::vector<std::vector<uint8_t>> copies(which.size());
  std::vector<std::span<const uint8_t>> spans(which.size());
  for (size_t k = 0; k < which.size(); ++k) {
    if (which[k] < 0) continue;
    const Located& l = s->inputs[which[k]];
    std::vector<uint8_t>& c = copies[k];
    c.resize(l.bytes);
    if (l.bytes == 0) continue;
    if (l.where == Where::kShared) {
      KJIT_RETURN_IF_ERROR(ipc::GuardedCopy(c.data(), l.host, l.bytes, TensorWhere(*s, which[k]).c_str()));
    } else if (l.where == Where::kHost) {
      std::memcpy(c.data(), HostBytes(l), l.bytes);
    } else if (k < device_copies.size() && device_copies[k] != nullptr) {
      std::memcpy(c.data(), device_copies[k], l.bytes);
    } else {
      return absl::FailedPreconditionError(absl::StrCat(
          "tensor '", s->request->inputs[which[k]].desc.name, "': device-resident index pointers were not read back"));
    }
    spans[k] = c;
  }
  KJIT_RETURN_IF_ERROR(s->launch->CheckIndexPointers(spans));
  // The launch stages these exact bytes: a client that rewrites its shared memory or device buffer
  // between this check and the launch cannot hand the kernels index pointers that were not checked.
  for (size_t k = 0; k < which.size(); ++k) {
    if (which[k] < 0) continue;
    Located& l = s->inputs[which[k]];
    l.where = Where::kHost;
    l.checked = std::move(copies[k]);
    l.host = nullptr;
    l.device = 0;
    l.region.reset();
  }
  return absl::OkStatus();
}

Status ReadBackIndexPointers(DeviceRuntime* dev, LaunchState* s) {
  KJIT_ASSIGN_OR_RETURN(const driver::Api* api, driver::Get());
  const std::vector<int> which = IndexPointerInputs(*s);
  std::vector<size_t> offset(which.size(), 0);
  size_t bytes = 0;
  for (size_t k = 0; k < which.size(); ++k) {
    if (which[k] < 0 || s->inputs[which[k]].where != Where::kCuda) continue;
    offset[k] = bytes;
    bytes += AlignUp(s->inputs[which[k]].bytes);
  }
  KJIT_ASSIGN_OR_RETURN(uint8_t* host, dev->staging().Pinned(bytes));
  const CUstream rb = dev->readback_stream();
  // On an error return the queued copies must finish before the pinned bytes are reused.
  QueuedWork drain{api, rb, true};
  // No stream waits for the launch's kjit_wait_event: a synchronous launch (the only kind read back)
  // has seen it complete on the host first (Launcher::Run).
  std::vector<const uint8_t*> copies(which.size(), nullptr);
  for (size_t k = 0; k < which.size(); ++k) {
    if (which[k] < 0 || s->inputs[which[k]].where != Where::kCuda) continue;
    const Located& l = s->inputs[which[k]];
    copies[k] = host + offset[k];
    if (l.bytes == 0) continue;
    KJIT_RETURN_IF_ERROR(driver::Check(api->cuMemcpyDtoHAsync(host + offset[k], l.device, l.bytes, rb),
                                       "cuMemcpyDtoHAsync(index pointer)"));
  }
  KJIT_RETURN_IF_ERROR(driver::Check(api->cuStreamSynchronize(rb), "cuStreamSynchronize(index pointer read-back)"));
  drain.armed = false;
  return CheckIndexPointers(s, copies);
}

}  // namespace kjit::launch::internal
