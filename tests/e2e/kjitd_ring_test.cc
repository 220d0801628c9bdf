// Launch rings (kjit.v1.KernelService/OpenRing, runtime/ipc/launch_ring.h) against a real
// compile-only kjitd: ModelInfer through shared memory answers exactly as the gRPC call does (also
// when requests repeat, which both transports do not parse again), every refusal has its status
// code, a broken ring leaves the daemon healthy, and a ring ends with its region (unregistered, or
// released with its session).
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "kjit/v1/kernel_service.grpc.pb.h"
#include "runtime/ipc/launch_ring.h"
#include "tests/e2e/daemon_fixture.h"
#include "tests/e2e/infer_requests.h"
#include "tests/unit/shm_object.h"

namespace kjit::testing {
namespace {

using grpc::StatusCode;
using std::chrono::microseconds;
using std::chrono::milliseconds;

constexpr size_t kRingShm = 1 << 20;

struct OpenedRing {
  std::unique_ptr<ShmObject> shm;
  std::unique_ptr<ipc::RingClient> client;  // null when setting the ring up failed (reported)
};

class RingTest : public ShmDaemonSuite {
 protected:
  grpc::Status OpenRing(const std::string& region, uint32_t* capacity = nullptr, const std::string& session = "") {
    grpc::ClientContext ctx;
    if (!session.empty()) ctx.AddMetadata("kjit-session", session);
    kjit::v1::OpenRingRequest req;
    req.set_region(region);
    kjit::v1::OpenRingResponse resp;
    grpc::Status s = kernels_->OpenRing(&ctx, req, &resp);
    if (capacity != nullptr) *capacity = resp.capacity();
    return s;
  }
  grpc::Status GrpcInfer(const Req& req) {
    grpc::ClientContext ctx;
    inference::ModelInferResponse resp;
    return stub_->ModelInfer(&ctx, req, &resp);
  }
  // ModelInfer over gRPC with these exact bytes as the request (a generic stub: they need not parse).
  grpc::Status RawGrpcInfer(const std::string& bytes) {
    grpc::GenericStub generic(daemon_->Channel());
    grpc::ClientContext ctx;
    grpc::Slice slice(bytes);
    grpc::ByteBuffer req(&slice, 1), resp;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&ctx, "/inference.GRPCInferenceService/ModelInfer", grpc::StubOptions(), &req, &resp,
                      [&done](grpc::Status st) { done.set_value(std::move(st)); });
    return done.get_future().get();
  }
  // A ring on a fresh object of `bytes` (1 MiB by default), registered as `name` (under `session`
  // when given) and opened.
  OpenedRing MakeRing(const std::string& name, const std::string& session = "", size_t bytes = kRingShm) {
    OpenedRing r{std::make_unique<ShmObject>(bytes), nullptr};
    if (r.shm->map() == nullptr) return r;
    auto ring = ipc::RingClient::Create(r.shm->map(), bytes);
    EXPECT_TRUE(ring.ok()) << ring.status();
    if (!ring.ok()) return r;
    EXPECT_EQ(Register(name, r.shm->key(), 0, bytes, session), StatusCode::OK);
    uint32_t capacity = 0;
    const grpc::Status s = OpenRing(name, &capacity, session);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(capacity, (bytes - ipc::kRingHeaderBytes) / 2);
    if (s.ok()) r.client = std::make_unique<ipc::RingClient>(*ring);
    return r;
  }
};

struct Answer {
  int code = -1;
  std::string message, response;
};

Answer Call(ipc::RingClient* ring, const std::string& request, microseconds timeout = milliseconds(5000)) {
  Answer a;
  const Status s = ring->Call(request, &a.response, &a.code, &a.message, timeout);
  EXPECT_TRUE(s.ok()) << s;
  return a;
}

TEST_F(RingTest, ModelInferThroughTheRingAnswersAsTheGrpcCall) {
  OpenedRing opened = MakeRing("ring");
  ASSERT_NE(opened.client, nullptr);
  ipc::RingClient* ring = opened.client.get();

  Req valid = ValidRequest();  // no GPU here: FAILED_PRECONDITION, from the same handler
  Req unknown = ValidRequest();
  unknown.set_model_name("no_such_model");
  Req bad_shape = ValidRequest();
  bad_shape.mutable_inputs(0)->set_shape(0, 3);
  for (const Req* r : {&valid, &unknown, &bad_shape}) {
    const grpc::Status want = GrpcInfer(*r);
    ASSERT_FALSE(want.ok());
    const Answer got = Call(ring, r->SerializeAsString());
    EXPECT_EQ(got.code, static_cast<int>(want.error_code())) << r->model_name();
    EXPECT_EQ(got.message, want.error_message());
    EXPECT_TRUE(got.response.empty());
  }
  EXPECT_EQ(Call(ring, valid.SerializeAsString()).code, static_cast<int>(StatusCode::FAILED_PRECONDITION));

  // Round trip of a refused request (parse + validation, no GPU), for the record.
  const std::string bytes = unknown.SerializeAsString();
  std::vector<double> us;
  for (int i = 0; i < 2000; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    Call(ring, bytes);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  std::printf("ring round trip of a refused ModelInfer: p50 %.1f us over %zu calls\n", us[us.size() / 2], us.size());
}

// A ring's poller, and each gRPC thread of kjitd, parses a request only when its bytes differ from
// the previous one's: every answer must still be the one for the bytes just sent, in any order,
// including a request of the same length that differs in one byte, a malformed one, and one over
// 1 MiB (which is not kept).
TEST_F(RingTest, EachAnswerIsForTheBytesJustSentWhenRequestsRepeat) {
  OpenedRing opened = MakeRing("ring", "", size_t{4} << 20);
  ASSERT_NE(opened.client, nullptr);
  ipc::RingClient* ring = opened.client.get();

  Req valid = ValidRequest();  // FAILED_PRECONDITION without a GPU
  Req near = ValidRequest();
  near.set_model_name("mla_verifz");  // same length: NOT_FOUND
  Req bad_shape = ValidRequest();
  bad_shape.mutable_inputs(0)->set_shape(0, 3);  // INVALID_ARGUMENT
  Req big = ValidRequest();  // 1.5 MiB of q inline: the wrong size, INVALID_ARGUMENT
  big.mutable_raw_input_contents(0)->append(size_t{3} << 19, '\0');
  const std::string garbage(valid.ByteSizeLong(), '\xff');
  ASSERT_EQ(valid.SerializeAsString().size(), near.SerializeAsString().size());
  struct Case {
    std::string bytes;
    int code;
    std::string message;
  };
  std::vector<Case> cases;
  for (const Req* r : {&valid, &near, &bad_shape, &big}) {
    const grpc::Status want = GrpcInfer(*r);
    ASSERT_FALSE(want.ok());
    cases.push_back({r->SerializeAsString(), static_cast<int>(want.error_code()), want.error_message()});
  }
  cases.push_back({garbage, static_cast<int>(StatusCode::INVALID_ARGUMENT), ""});
  for (const int k : {0, 0, 1, 1, 0, 2, 2, 1, 4, 4, 0, 4, 1, 3, 3, 0, 3, 2, 0}) {
    const Answer got = Call(ring, cases[k].bytes);
    EXPECT_EQ(got.code, cases[k].code) << "ring, case " << k;
    const grpc::Status raw = RawGrpcInfer(cases[k].bytes);
    EXPECT_EQ(static_cast<int>(raw.error_code()), cases[k].code) << "gRPC, case " << k;
    if (k < 4) {
      EXPECT_EQ(got.message, cases[k].message) << "ring, case " << k;
      EXPECT_EQ(raw.error_message(), cases[k].message) << "gRPC, case " << k;
    } else {
      EXPECT_NE(raw.error_message().find("not a serialized inference.ModelInferRequest"), std::string::npos)
          << raw.error_message();
    }
  }
}

TEST_F(RingTest, MalformedRingContentsAreRefusedAndTheDaemonStaysHealthy) {
  OpenedRing opened = MakeRing("ring");
  ASSERT_NE(opened.client, nullptr);
  ipc::RingClient* ring = opened.client.get();

  const Answer garbage = Call(ring, std::string(100, '\xff'));
  EXPECT_EQ(garbage.code, static_cast<int>(StatusCode::INVALID_ARGUMENT));
  EXPECT_NE(garbage.message.find("not a serialized inference.ModelInferRequest"), std::string::npos)
      << garbage.message;

  // A request size past the capacity, written by hand (RingClient refuses to send one).
  auto* h = reinterpret_cast<ipc::RingHeader*>(opened.shm->map());
  EXPECT_FALSE(ring->Call(std::string(ring->capacity() + 1, 'x'), nullptr, nullptr, nullptr, milliseconds(10)).ok());
  h->request_bytes = 0xfffffff0u;
  const uint32_t seq = h->request_seq + 1;
  __atomic_store_n(&h->request_seq, seq, __ATOMIC_RELEASE);
  ipc::FutexWakeAll(&h->request_seq);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (__atomic_load_n(&h->response_seq, __ATOMIC_ACQUIRE) != seq && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(microseconds(100));
  }
  ASSERT_EQ(__atomic_load_n(&h->response_seq, __ATOMIC_ACQUIRE), seq);
  EXPECT_EQ(h->status_code, static_cast<int>(StatusCode::INVALID_ARGUMENT));
  const char* msg = reinterpret_cast<const char*>(opened.shm->map()) + ipc::kRingHeaderBytes + ring->capacity();
  EXPECT_NE(std::string(msg, h->message_bytes).find("exceeds the ring's capacity"), std::string::npos);

  // Still serving, on the ring and over gRPC.
  EXPECT_EQ(Call(ring, ValidRequest().SerializeAsString()).code, static_cast<int>(StatusCode::FAILED_PRECONDITION));
  grpc::ClientContext ctx;
  inference::ServerLiveResponse live;
  EXPECT_TRUE(stub_->ServerLive(&ctx, {}, &live).ok());
  EXPECT_TRUE(live.live());
}

TEST_F(RingTest, OpenRingRefusesWhatIsNotARing) {
  ShmObject blank(kRingShm);
  ASSERT_NE(blank.map(), nullptr);
  EXPECT_EQ(OpenRing("no_such_region").error_code(), StatusCode::NOT_FOUND);
  ASSERT_EQ(Register("blank", blank.key(), 0, kRingShm), StatusCode::OK);
  const grpc::Status no_header = OpenRing("blank");
  EXPECT_EQ(no_header.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(no_header.error_message().find("ring header"), std::string::npos) << no_header.error_message();

  // A header whose capacity does not fit the registered window.
  ASSERT_TRUE(ipc::RingClient::Create(blank.map(), kRingShm).ok());
  ASSERT_EQ(Register("small", blank.key(), 0, 4096), StatusCode::OK);
  const grpc::Status too_big = OpenRing("small");
  EXPECT_EQ(too_big.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(too_big.error_message().find("needs"), std::string::npos) << too_big.error_message();
  ASSERT_EQ(Register("tiny", blank.key(), 0, 100), StatusCode::OK);
  EXPECT_EQ(OpenRing("tiny").error_code(), StatusCode::INVALID_ARGUMENT);
  // A header claiming more than 2^31 bytes each way (a request that large is never allocated).
  auto* header = reinterpret_cast<ipc::RingHeader*>(blank.map());
  header->capacity = ipc::kRingMaxCapacity + 1;
  const grpc::Status huge = OpenRing("blank");
  EXPECT_EQ(huge.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(huge.error_message().find("at most 2147483648"), std::string::npos) << huge.error_message();
  ASSERT_TRUE(ipc::RingClient::Create(blank.map(), kRingShm).ok());

  // A valid header at an offset that is not 64-byte aligned: its futex words would be misaligned
  // (FUTEX_WAIT fails at once, and the idle poller spun a whole core).
  ShmObject shifted(kRingShm);
  ASSERT_NE(shifted.map(), nullptr);
  for (size_t offset : {2, 4, 32}) {
    ASSERT_TRUE(ipc::RingClient::Create(shifted.map() + offset, kRingShm - 64).ok());
    const std::string name = "shifted" + std::to_string(offset);
    ASSERT_EQ(Register(name, shifted.key(), offset, kRingShm - 64), StatusCode::OK);
    const grpc::Status misaligned = OpenRing(name);
    EXPECT_EQ(misaligned.error_code(), StatusCode::INVALID_ARGUMENT) << offset;
    EXPECT_NE(misaligned.error_message().find("multiple of 64"), std::string::npos) << misaligned.error_message();
  }
  ASSERT_TRUE(ipc::RingClient::Create(shifted.map() + 64, kRingShm - 64).ok());
  ASSERT_EQ(Register("shifted64", shifted.key(), 64, kRingShm - 64), StatusCode::OK);
  EXPECT_TRUE(OpenRing("shifted64").ok());

  EXPECT_TRUE(OpenRing("blank").ok());
  EXPECT_EQ(OpenRing("blank").error_code(), StatusCode::ALREADY_EXISTS);
  grpc::ClientContext ctx;
  kjit::v1::CloseRingRequest close;
  close.set_region("blank");
  kjit::v1::CloseRingResponse closed;
  EXPECT_TRUE(kernels_->CloseRing(&ctx, close, &closed).ok());
  EXPECT_TRUE(OpenRing("blank").ok());  // closed: may be opened again
}

// One poller per ring's memory: the same bytes registered under another name (or a window that
// overlaps them) cannot be opened as a second ring, which would copy and decode every request again.
TEST_F(RingTest, ARingsMemoryHasOnePoller) {
  ShmObject two(2 * kRingShm);
  ASSERT_NE(two.map(), nullptr);
  ASSERT_TRUE(ipc::RingClient::Create(two.map(), kRingShm).ok());
  ASSERT_TRUE(ipc::RingClient::Create(two.map() + kRingShm, kRingShm).ok());
  ASSERT_EQ(Register("first", two.key(), 0, kRingShm), StatusCode::OK);
  ASSERT_EQ(Register("alias", two.key(), 0, kRingShm), StatusCode::OK);
  ASSERT_EQ(Register("second", two.key(), kRingShm, kRingShm), StatusCode::OK);
  ASSERT_TRUE(OpenRing("first").ok());
  const grpc::Status alias = OpenRing("alias");
  EXPECT_EQ(alias.error_code(), StatusCode::ALREADY_EXISTS) << alias.error_message();
  EXPECT_NE(alias.error_message().find("shares its memory with a launch ring"), std::string::npos)
      << alias.error_message();
  EXPECT_TRUE(OpenRing("second").ok()) << "the object's other half is memory of its own";
  grpc::ClientContext ctx;
  kjit::v1::CloseRingRequest close;
  close.set_region("first");
  kjit::v1::CloseRingResponse closed;
  ASSERT_TRUE(kernels_->CloseRing(&ctx, close, &closed).ok());
  EXPECT_TRUE(OpenRing("alias").ok()) << "its memory has no poller any more";
}

// The daemon's peak resident memory in KiB (VmHWM), or -1.
long PeakRssKiB(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// Large requests (tensors inline) are copied, parsed and answered one at a time over all rings: a
// client with many rings cannot make kjitd hold all their parses at once. Each request here is
// 12 MiB of INT64 zeros on the wire, 96 MiB or more once parsed (and then refused: the contents do
// not fit kv_indices' shape).
TEST_F(RingTest, LargeRequestsOfManyRingsAreServedOneAtATime) {
  constexpr int kRings = 4;
  Req r = ValidRequest();
  r.mutable_raw_input_contents()->DeleteSubrange(5, 1);
  r.mutable_inputs(5)->mutable_contents()->mutable_int64_contents()->Resize(12 << 20, 0);
  const std::string bytes = r.SerializeAsString();
  const size_t ring_bytes = ipc::kRingHeaderBytes + 2 * (bytes.size() + 4096);
  std::vector<OpenedRing> rings;
  for (int i = 0; i < kRings; ++i) {
    rings.push_back(MakeRing("large" + std::to_string(i), "", ring_bytes));
    ASSERT_NE(rings.back().client, nullptr);
  }
  {
    std::ofstream clear("/proc/" + std::to_string(daemon_->pid()) + "/clear_refs");
    clear << "5";  // resets VmHWM to the present resident size
    if (!clear.flush()) GTEST_SKIP() << "cannot reset the daemon's peak resident size";
  }
  const long before = PeakRssKiB(daemon_->pid());
  ASSERT_GT(before, 0);
  std::vector<std::future<Answer>> answers;
  for (auto& ring : rings) {
    answers.push_back(std::async(std::launch::async, [&ring, &bytes] {
      return Call(ring.client.get(), bytes, std::chrono::seconds(60));
    }));
  }
  for (auto& f : answers) {
    const Answer a = f.get();
    EXPECT_EQ(a.code, static_cast<int>(StatusCode::INVALID_ARGUMENT)) << a.message;
    EXPECT_NE(a.message.find("typed contents values"), std::string::npos) << a.message;
  }
  const long grew_mib = (PeakRssKiB(daemon_->pid()) - before) >> 10;
  RecordProperty("peak_growth_mib", std::to_string(grew_mib));
  // Measured on 2 cores: 220-252 MiB one at a time, 485-519 MiB when the rings parse at once (more
  // with more cores).
  EXPECT_LT(grew_mib, 400) << "kjitd's peak resident memory grew by " << grew_mib << " MiB";
}

TEST_F(RingTest, RingEndsWithItsRegionAndItsSession) {
  OpenedRing opened = MakeRing("ring");
  ASSERT_NE(opened.client, nullptr);
  ipc::RingClient* ring = opened.client.get();
  EXPECT_EQ(Call(ring, ValidRequest().SerializeAsString()).code, static_cast<int>(StatusCode::FAILED_PRECONDITION));
  ASSERT_EQ(Unregister("ring"), StatusCode::OK);
  std::this_thread::sleep_for(milliseconds(200));  // the poller notices when it next goes idle
  Answer none;
  EXPECT_EQ(ring->Call(ValidRequest().SerializeAsString(), &none.response, &none.code, &none.message,
                       milliseconds(300))
                .code(),
            absl::StatusCode::kDeadlineExceeded);

  // Registered under a session: the ring goes with it.
  grpc::ClientContext sctx;
  auto stream = kernels_->OpenSession(&sctx);
  kjit::v1::SessionEvent hello;
  ASSERT_TRUE(stream->Read(&hello));
  OpenedRing in_session = MakeRing("session_ring", hello.session_id());
  ASSERT_NE(in_session.client, nullptr);
  ipc::RingClient* ring2 = in_session.client.get();
  EXPECT_EQ(Call(ring2, ValidRequest().SerializeAsString()).code, static_cast<int>(StatusCode::FAILED_PRECONDITION));
  // Another session's ring is not this request's to open or close.
  EXPECT_EQ(OpenRing("session_ring").error_code(), StatusCode::NOT_FOUND);
  {
    grpc::ClientContext cctx;
    kjit::v1::CloseRingRequest close;
    close.set_region("session_ring");
    kjit::v1::CloseRingResponse closed;
    EXPECT_TRUE(kernels_->CloseRing(&cctx, close, &closed).ok());  // unseen: nothing happens
  }
  EXPECT_EQ(Call(ring2, ValidRequest().SerializeAsString()).code, static_cast<int>(StatusCode::FAILED_PRECONDITION));
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_EQ(ring2->Call(ValidRequest().SerializeAsString(), &none.response, &none.code, &none.message,
                        milliseconds(300))
                .code(),
            absl::StatusCode::kDeadlineExceeded);
}

// Whether the process maps the shared memory object `key` (/proc/PID/maps names /dev/shm/KEY).
bool Maps(pid_t pid, const std::string& key) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/dev/shm" + key) != std::string::npos) return true;
  }
  return false;
}

// A ring whose region is unregistered stops, and its poller is dropped at once with the mapping: it
// stayed mapped (and no longer counted against --max-system-shm-bytes) until the next OpenRing.
TEST_F(RingTest, AnUnregisteredRingIsUnmappedAtOnce) {
  OpenedRing opened = MakeRing("ring");
  ASSERT_NE(opened.client, nullptr);
  EXPECT_EQ(Call(opened.client.get(), ValidRequest().SerializeAsString()).code,
            static_cast<int>(StatusCode::FAILED_PRECONDITION));
  ASSERT_TRUE(Maps(daemon_->pid(), opened.shm->key()));
  ASSERT_EQ(Unregister("ring"), StatusCode::OK);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (Maps(daemon_->pid(), opened.shm->key()) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_FALSE(Maps(daemon_->pid(), opened.shm->key())) << "kjitd still maps the unregistered ring's object";
}

TEST_F(RingTest, TruncatedRingStopsItsPollerNotTheDaemon) {
  OpenedRing opened = MakeRing("ring");
  ASSERT_NE(opened.client, nullptr);
  opened.shm->Resize(0);  // the poller's next look at the header faults
  std::this_thread::sleep_for(milliseconds(100));
  grpc::ClientContext ctx;
  inference::ServerLiveResponse live;
  EXPECT_TRUE(stub_->ServerLive(&ctx, {}, &live).ok());
  // Unregistering the broken region is fine too (the test does not touch its own mapping again).
  EXPECT_EQ(Unregister("ring"), StatusCode::OK);
}

}  // namespace
}  // namespace kjit::testing
