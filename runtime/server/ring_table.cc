#include "runtime/server/ring_table.h"

#include <chrono>
#include <cstring>
#include <exception>
#include <new>

#include "absl/strings/str_cat.h"
#include "runtime/ipc/launch_ring.h"
#include "runtime/ipc/sigbus_guard.h"
#include "runtime/server/grpc_status.h"
#include "runtime/common/client_text.h"
#include "runtime/common/log.h"
#include "runtime/server/request_cache.h"

namespace kjit::server {

// One ring's poller thread. Every access to the shared region is guarded (the client may truncate
// the object) and bounded by the capacity read at Open; the request is copied out before parsing.
class RingPoller {
 public:
  RingPoller(std::shared_ptr<const ipc::Region> region, uint32_t capacity, uint64_t max_message,
             const ipc::RegionRegistry* regions, const InferHandler* handler, std::chrono::microseconds spin,
             std::timed_mutex* large_request, std::function<void()> on_finish)
      : region_(std::move(region)),
        capacity_(capacity),
        max_message_(max_message),
        regions_(regions),
        handler_(handler),
        spin_(spin),
        large_request_(large_request),
        on_finish_(std::move(on_finish)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~RingPoller() {
    Stop();
    thread_.join();
  }
  // Tells the poller to stop after the request it is serving (the destructor waits for it).
  void Stop() {
    stop_ = true;
    ipc::FutexWakeAll(&header()->request_seq);
  }
  bool finished() const { return finished_; }
  const ipc::Region* region() const { return region_.get(); }
  uint32_t capacity() const { return capacity_; }
  // Whether the registry still holds this ring's region, as its registrant sees it.
  bool StillRegistered() const {
    auto current = regions_->FindRegion(region_->name, scope_);
    return current.ok() && current->get() == region_.get();
  }

 private:
  ipc::RingHeader* header() const { return reinterpret_cast<ipc::RingHeader*>(region_->system->data()); }
  char* area(size_t offset) const { return reinterpret_cast<char*>(region_->system->data()) + offset; }

  Status Put(uint32_t* field, uint32_t value) {
    return ipc::GuardedCopy(field, &value, sizeof(value), "the launch ring");
  }

  // Runs one request and publishes its answer under `seq`.
  Status Serve(uint32_t seq) {
    ipc::RingHeader* h = header();
    std::string& out = *cache_.outgoing();
    out.clear();
    Status call = absl::OkStatus();
    KJIT_ASSIGN_OR_RETURN(const uint32_t n, ipc::GuardedLoad32(&h->request_bytes, "the launch ring"));
    if (n > capacity_) {
      call = absl::InvalidArgumentError(
          absl::StrCat("ring request of ", n, " bytes exceeds the ring's capacity of ", capacity_));
    } else if (n > max_message_) {
      // The same bound as a gRPC message: a ring's request is copied into kjitd's memory.
      call = absl::ResourceExhaustedError(absl::StrCat("ring request of ", n, " bytes exceeds kjitd's limit of ",
                                                       max_message_,
                                                       " (--max-request-bytes); put tensors in shared memory regions"));
    } else {
      // One large request (tensors inline) at a time over all rings, until it is answered: its copy
      // and its parse take several times its bytes (an INT64 zero is one byte on the wire and eight
      // parsed), and a client with many rings could otherwise have all of them in memory at once.
      std::unique_lock<std::timed_mutex> gate(*large_request_, std::defer_lock);
      if (n > RequestCache::kKeepBytes) {
        while (!gate.try_lock_for(std::chrono::milliseconds(50))) {
          if (stop_) return absl::CancelledError("the ring was closed while its request waited for another ring's");
          // Its region unregistered (or released with its session) meanwhile: the ring is over, and
          // the request is not run as a client that gave the ring up.
          if (RegionGone()) return absl::CancelledError("the ring's region left while its request waited");
        }
      }
      // As on the gRPC path (grpc_queues.cc), no exception leaves this thread: it would end the
      // process. Out of memory is the client's RESOURCE_EXHAUSTED, anything else INTERNAL.
      try {
        std::string* bytes = cache_.incoming();
        bytes->resize(n);
        KJIT_RETURN_IF_ERROR(ipc::GuardedCopy(bytes->data(), area(ipc::kRingHeaderBytes), n, "the launch ring"));
        const StatusOr<const inference::ModelInferRequest*> req = cache_.Parse(wire_limits_);
        if (!req.ok()) {
          call = req.status();
        } else {
          inference::ModelInferResponse* resp = cache_.response();
          call = (*handler_)(**req, scope_, resp);
          if (call.ok()) {
            resp->SerializeToString(&out);
            if (out.size() > max_message_) {
              call = absl::ResourceExhaustedError(
                  absl::StrCat("the response of ", out.size(), " bytes exceeds kjitd's limit of ", max_message_,
                               " (--max-request-bytes); use outputs in regions"));
              out.clear();
            } else if (out.size() > capacity_) {
              call = absl::ResourceExhaustedError(absl::StrCat("the response of ", out.size(),
                                                               " bytes exceeds the ring's capacity of ", capacity_,
                                                               "; use a larger ring or outputs in regions"));
              out.clear();
            }
          }
        }
      } catch (const std::bad_alloc&) {
        out.clear();
        call = absl::ResourceExhaustedError(
            "kjitd is out of memory (or address space) for this request; retry later or send less");
        LogRateLimited(LogLevel::kWarn, "out-of-memory", "a ring request failed: kjitd is out of memory");
      } catch (const std::exception& e) {
        out.clear();
        call = absl::InternalError("kjitd failed on this request; see its log");
        LogRateLimited(LogLevel::kError, "exception", absl::StrCat("a ring request failed: ", e.what()));
      }
    }
    const std::string message(call.message().substr(0, capacity_ - out.size()));
    char* dst = area(ipc::kRingHeaderBytes + capacity_);
    KJIT_RETURN_IF_ERROR(ipc::GuardedCopy(dst, out.data(), out.size(), "the launch ring"));
    KJIT_RETURN_IF_ERROR(ipc::GuardedCopy(dst + out.size(), message.data(), message.size(), "the launch ring"));
    KJIT_RETURN_IF_ERROR(Put(&h->response_bytes, static_cast<uint32_t>(out.size())));
    KJIT_RETURN_IF_ERROR(Put(reinterpret_cast<uint32_t*>(&h->status_code),
                             static_cast<uint32_t>(ToGrpc(call).error_code())));
    KJIT_RETURN_IF_ERROR(Put(&h->message_bytes, static_cast<uint32_t>(message.size())));
    __atomic_thread_fence(__ATOMIC_RELEASE);  // everything above before the sequence number
    KJIT_RETURN_IF_ERROR(Put(&h->response_seq, seq));
    KJIT_ASSIGN_OR_RETURN(const uint32_t sleeping, ipc::GuardedLoad32(&h->client_sleeping, "the launch ring"));
    if (sleeping != 0) ipc::FutexWakeAll(&h->response_seq);
    cache_.Done(out.size());
    return absl::OkStatus();
  }

  // Whether the region has left the registry (unregistered, or released with its session): looked
  // up only when some region has left since the last look, so a busy ring pays one atomic load per
  // request and still stops with its region.
  bool RegionGone() {
    const uint64_t removals = regions_->RemovalCount();
    if (removals == seen_removals_) return false;
    seen_removals_ = removals;
    return !StillRegistered();
  }

  void Run() {
    ipc::RingHeader* h = header();
    Status s = absl::OkStatus();
    auto last = ipc::GuardedLoad32(&h->response_seq, "the launch ring");
    if (!last.ok()) s = last.status();
    uint32_t done = last.ok() ? *last : 0;
    auto idle_since = std::chrono::steady_clock::now();
    while (s.ok() && !stop_ && !RegionGone()) {
      auto seq = ipc::GuardedLoad32(&h->request_seq, "the launch ring");
      if (!seq.ok()) {
        s = seq.status();
        break;
      }
      if (*seq != done) {
        s = Serve(*seq);
        done = *seq;
        idle_since = std::chrono::steady_clock::now();
        continue;
      }
      if (std::chrono::steady_clock::now() - idle_since < spin_) {
        ipc::CpuRelax();
        continue;
      }
      // Idle: sleep until the client writes (the loop's condition looks at the region again).
      if (s = Put(&h->daemon_sleeping, 1); !s.ok()) break;
      auto again = ipc::GuardedLoad32(&h->request_seq, "the launch ring");
      if (again.ok() && *again == done) ipc::FutexWait(&h->request_seq, done, std::chrono::milliseconds(50));
      s = Put(&h->daemon_sleeping, 0);
    }
    if (!s.ok()) Log(LogLevel::kWarn, absl::StrCat("launch ring '", ClientText(region_->name), "' stopped: ", s.message()));
    finished_ = true;
    if (!stop_) on_finish_();  // stopped by itself: the table drops it (a Close or Clear drops it anyway)
  }

  std::shared_ptr<const ipc::Region> region_;
  const ipc::Scope scope_{region_->session, region_->owner};  // its registrant's: the ring's requests run as it
  uint32_t capacity_;
  uint64_t max_message_;
  const InferWireLimits wire_limits_{max_message_};  // a request's typed contents parse to at most that too
  const ipc::RegionRegistry* regions_;
  const InferHandler* handler_;
  std::chrono::microseconds spin_;
  std::timed_mutex* large_request_;  // the table's: held while a large request is copied, parsed and run
  std::function<void()> on_finish_;  // the table's janitor, told when Run ends by itself
  // The registry's RemovalCount when the region was last looked up; none yet, so the first pass
  // looks it up (it may have gone between Open and this thread's start).
  uint64_t seen_removals_ = ~uint64_t{0};
  // Serve's messages and buffers, kept across requests (this thread alone uses them).
  RequestCache cache_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

RingTable::RingTable(const ipc::RegionRegistry* regions) : regions_(regions), janitor_([this] { Janitor(); }) {}

RingTable::~RingTable() {
  {
    std::lock_guard<std::mutex> lock(janitor_mu_);
    janitor_stop_ = true;
  }
  janitor_cv_.notify_one();
  janitor_.join();
  Clear();
}

void RingTable::PollerFinished() {
  {
    std::lock_guard<std::mutex> lock(janitor_mu_);
    ++finished_pollers_;
  }
  janitor_cv_.notify_one();
}

void RingTable::Janitor() {
  std::unique_lock<std::mutex> lock(janitor_mu_);
  for (;;) {
    janitor_cv_.wait(lock, [this] { return janitor_stop_ || finished_pollers_ > 0; });
    if (janitor_stop_) return;
    finished_pollers_ = 0;
    lock.unlock();  // a poller telling it (PollerFinished) must not wait for the prune's joins
    {
      std::lock_guard<std::mutex> table(mu_);
      PruneLocked();  // finished pollers only: their joins return at once
    }
    lock.lock();
  }
}

StatusOr<uint32_t> RingTable::Open(const std::string& name, const ipc::Scope& session) {
  KJIT_ASSIGN_OR_RETURN(std::shared_ptr<const ipc::Region> region, regions_->FindRegion(name, session));
  if (region->kind() != ipc::RegionKind::kSystem)
    return absl::InvalidArgumentError(
        absl::StrCat("region '", ClientText(name), "' is CUDA memory; a launch ring lives in system shared memory"));
  if (region->system->others_may_write())
    return absl::PermissionDeniedError(absl::StrCat(
        "region '", ClientText(name), "' (shared memory key '", ClientText(region->system->key()),
        "') may be written by users other than this client (its owner, its group or other write permission, or an "
        "ACL): whoever writes a launch ring's bytes runs launches as the client that opened it; create the ring's "
        "object as this client's own user with mode 0600, and register it again"));
  if (region->size() < ipc::kRingHeaderBytes)
    return absl::InvalidArgumentError(absl::StrCat("region '", ClientText(name), "' has ", region->size(),
                                                   " bytes, less than a launch ring header (",
                                                   ipc::kRingHeaderBytes, ")"));
  if (const auto at = reinterpret_cast<uintptr_t>(region->system->data()); at % ipc::kRingAlignment != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "region '", ClientText(name), "' starts ", at % ipc::kRingAlignment, " bytes past a ", ipc::kRingAlignment,
        "-byte boundary; a launch ring's header must be aligned: register it at an offset that is a multiple of ",
        ipc::kRingAlignment));
  ipc::RingHeader h;
  KJIT_RETURN_IF_ERROR(ipc::GuardedCopy(&h, region->system->data(), sizeof(h), "the launch ring"));
  if (h.magic != ipc::kRingMagic || h.version != ipc::kRingVersion)
    return absl::InvalidArgumentError(absl::StrCat("region '", ClientText(name),
                                                   "' does not start with a kjit launch ring header of version ",
                                                   ipc::kRingVersion, " (write one with RingClient::Create)"));
  if (h.capacity > ipc::kRingMaxCapacity)
    return absl::InvalidArgumentError(absl::StrCat("region '", ClientText(name), "': a ring's capacity is at most ",
                                                   ipc::kRingMaxCapacity, " bytes, its header says ", h.capacity));
  if (h.capacity == 0 || ipc::RingBytes(h.capacity) > region->size())
    return absl::InvalidArgumentError(absl::StrCat("region '", ClientText(name), "': a ring of capacity ", h.capacity,
                                                   " needs ", ipc::RingBytes(h.capacity), " bytes, the region has ",
                                                   region->size()));
  // A poller replaced below may be serving a request still: it is joined after the lock is released
  // (declared before the lock, destroyed after it), or every OpenRing and CloseRing would wait on it.
  std::unique_ptr<RingPoller> stale;
  std::lock_guard<std::mutex> lock(mu_);
  PruneLocked();
  const Key key(region->owner, name);
  if (auto it = rings_.find(key); it != rings_.end()) {
    if (it->second->region() == region.get())
      return absl::AlreadyExistsError(absl::StrCat("region '", ClientText(name), "' is a launch ring already"));
    stale = std::move(it->second);  // a ring on an earlier region of that name, not yet noticed that it is gone
    rings_.erase(it);
  }
  // Pollers whose region was unregistered stop by themselves within 50 ms (Run); until then they
  // do not count, or a client that replaces its ring (unregisters it and opens another) would be
  // refused at the limit.
  // Still, a poller held up by a slow request keeps its thread: at twice the limit nothing opens.
  size_t live = 0, mine = 0;
  for (const auto& [ring_key, poller] : rings_) {
    if (!poller->StillRegistered()) continue;
    ++live;
    mine += !region->owner.empty() && poller->region()->owner == region->owner;
    // One poller per ring's memory: the same bytes registered under other names would each get a
    // poller that copies and decodes every request the client writes there.
    if (region->system->SharesBytesWith(ipc::RingBytes(h.capacity), *poller->region()->system,
                                        ipc::RingBytes(poller->capacity()))) {
      return absl::AlreadyExistsError(absl::StrCat(
          "region '", ClientText(name), "' shares its memory with a launch ring already open (the same shared "
          "memory object, overlapping bytes, under another region name): a ring's memory has one poller; close "
          "that ring first or give this one memory of its own"));
    }
  }
  if (live >= max_rings_) {
    return absl::ResourceExhaustedError(absl::StrCat("kjitd serves ", max_rings_,
                                                     " launch rings, its limit (--max-rings): close one first"));
  }
  if (rings_.size() >= 2 * max_rings_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "kjitd serves ", live, " launch rings, and ", rings_.size() - live,
        " more whose regions have left are still finishing a request; together they hold twice its limit of ",
        max_rings_, " (--max-rings) in threads: retry once they finish"));
  }
  if (!region->owner.empty() && mine >= ipc::IdentityShare(max_rings_)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this client's user has ", mine, " launch rings open, ", ipc::IdentityShareText(max_rings_, "--max-rings"),
        ": close one first"));
  }
  rings_[key] = std::make_unique<RingPoller>(std::move(region), h.capacity, max_message_, regions_, &handler_,
                                             spin_, &large_request_, [this] { PollerFinished(); });
  return h.capacity;
}

void RingTable::Close(const std::string& name, const ipc::Scope& session) {
  std::unique_ptr<RingPoller> poller;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = rings_.find(Key(session.owner, name));
    if (it == rings_.end()) return;
    const ipc::Region& r = *it->second->region();
    if (!ipc::RegionRegistry::Sees(session, r.session, r.owner)) return;
    poller = std::move(it->second);
    rings_.erase(it);
  }
  poller.reset();  // joins outside the lock
}

void RingTable::Clear() {
  std::map<Key, std::unique_ptr<RingPoller>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.swap(rings_);
  }
  for (auto& [key, poller] : all) poller->Stop();
  all.clear();
}

size_t RingTable::Count() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [key, poller] : rings_) n += poller->finished() ? 0 : 1;
  return n;
}

void RingTable::PruneLocked() {
  for (auto it = rings_.begin(); it != rings_.end();) {
    if (it->second->finished()) {
      it = rings_.erase(it);  // its thread has left Run: the join is immediate
    } else {
      ++it;
    }
  }
}

}  // namespace kjit::server
