// A real kjitd (compile-only on this machine) over a temporary Unix socket: health, metadata,
// configuration, repository index, unimplemented methods, socket permissions, clean SIGTERM.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "health/v1/health.grpc.pb.h"
#include "inference/grpc_service.grpc.pb.h"
#include "tests/e2e/daemon_fixture.h"

namespace kjit::testing {
namespace {

class MetadataTest : public DaemonSuite {};

TEST_F(MetadataTest, HealthServingLiveReady) {
  auto health = grpc::health::v1::Health::NewStub(daemon_->Channel());
  grpc::ClientContext c1;
  grpc::health::v1::HealthCheckResponse h;
  ASSERT_TRUE(health->Check(&c1, {}, &h).ok());
  EXPECT_EQ(h.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  grpc::ClientContext c2, c3;
  inference::ServerLiveResponse live;
  inference::ServerReadyResponse ready;
  ASSERT_TRUE(stub_->ServerLive(&c2, {}, &live).ok());
  ASSERT_TRUE(stub_->ServerReady(&c3, {}, &ready).ok());
  EXPECT_TRUE(live.live());
  EXPECT_TRUE(ready.ready());
}

// Each Watch holds a thread of the daemon and needs no token: a client cannot open them without
// bound. One user may hold three quarters of the cap (the whole cap over two users:
// test_kjitd_perimeter.py); past that the next is refused with a message, and an ended one frees its
// place.
TEST_F(MetadataTest, WatchStreamsAreCapped) {
  using grpc::health::v1::HealthCheckResponse;
  auto health = grpc::health::v1::Health::NewStub(daemon_->Channel());
  constexpr int kCap = 48;  // ipc::IdentityShare(HealthService::kMaxWatches): this test is one user
  struct Stream {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader;
  };
  std::vector<std::unique_ptr<Stream>> streams;
  for (int i = 0; i < kCap; ++i) {
    streams.push_back(std::make_unique<Stream>());
    streams.back()->reader = health->Watch(&streams.back()->ctx, {});
    HealthCheckResponse r;
    ASSERT_TRUE(streams.back()->reader->Read(&r)) << "stream " << i;
    EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  }
  const auto watch_status = [&] {
    Stream extra;
    extra.ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    extra.reader = health->Watch(&extra.ctx, {});
    HealthCheckResponse r;
    if (extra.reader->Read(&r)) {
      extra.ctx.TryCancel();
      extra.reader->Finish();
      return grpc::Status::OK;
    }
    return extra.reader->Finish();
  };
  const grpc::Status over = watch_status();
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << over.error_message();
  EXPECT_NE(over.error_message().find("has 48 health Watch streams open, three quarters of kjitd's limit of 64"),
            std::string::npos)
      << over.error_message();
  grpc::ClientContext check;
  HealthCheckResponse h;
  EXPECT_TRUE(health->Check(&check, {}, &h).ok()) << "Check is not capped";
  streams.back()->ctx.TryCancel();  // the daemon sees it within 100 ms
  streams.back()->reader->Finish();
  streams.pop_back();
  grpc::Status again = watch_status();
  for (int i = 0; i < 50 && again.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    again = watch_status();
  }
  EXPECT_TRUE(again.ok()) << again.error_message();
  for (auto& s : streams) {
    s->ctx.TryCancel();
    s->reader->Finish();
  }
}

TEST_F(MetadataTest, ServerMetadataAdvertisesImplementedExtensions) {
  grpc::ClientContext ctx;
  inference::ServerMetadataResponse md;
  ASSERT_TRUE(stub_->ServerMetadata(&ctx, {}, &md).ok());
  EXPECT_EQ(md.name(), "kjit");
  EXPECT_FALSE(md.version().empty());
  std::vector<std::string> ext(md.extensions().begin(), md.extensions().end());
  EXPECT_EQ(ext, (std::vector<std::string>{"cuda_shared_memory", "system_shared_memory",
                                           "model_configuration", "statistics"}));
}

TEST_F(MetadataTest, ModelMetadataAndConfig) {
  for (const char* name : {"mla_verify", "mla_verify_naive"}) {
    grpc::ClientContext ctx;
    inference::ModelMetadataRequest req;
    req.set_name(name);
    inference::ModelMetadataResponse md;
    ASSERT_TRUE(stub_->ModelMetadata(&ctx, req, &md).ok());
    EXPECT_EQ(md.name(), name);
    EXPECT_EQ(md.platform(), "kjit");
    ASSERT_EQ(md.versions_size(), 1);
    ASSERT_EQ(md.inputs_size(), 10);  // the last, v_extend, is optional (checked against k_extend)
    EXPECT_EQ(md.inputs(9).name(), "v_extend");
    EXPECT_EQ(md.inputs(0).name(), "q");
    EXPECT_EQ(md.inputs(0).datatype(), "BF16");
    EXPECT_EQ(std::vector<int64_t>(md.inputs(0).shape().begin(), md.inputs(0).shape().end()),
              (std::vector<int64_t>{-1, -1, 576}));
    // kv_cache's usual datatype is BF16; an fp8 cache is UINT8 with kjit_kv_dtype (ModelConfig's
    // request_parameters below). KServe's TensorMetadata has one datatype per input.
    EXPECT_EQ(md.inputs(2).name(), "kv_cache");
    EXPECT_EQ(md.inputs(2).datatype(), "BF16");
    EXPECT_EQ(std::vector<int64_t>(md.inputs(2).shape().begin(), md.inputs(2).shape().end()),
              (std::vector<int64_t>{-1, 1, 576}));
    EXPECT_EQ(md.inputs(5).name(), "kv_indices");
    EXPECT_EQ(md.inputs(5).datatype(), "INT64");
    ASSERT_EQ(md.outputs_size(), 2);
    EXPECT_EQ(md.outputs(0).name(), "o");
    EXPECT_EQ(md.outputs(1).datatype(), "FP32");

    grpc::ClientContext cctx;
    inference::ModelConfigRequest creq;
    creq.set_name(name);
    inference::ModelConfigResponse cfg;
    ASSERT_TRUE(stub_->ModelConfig(&cctx, creq, &cfg).ok());
    EXPECT_EQ(cfg.config().name(), name);
    EXPECT_EQ(cfg.config().backend(), "nvrtc");
    EXPECT_EQ(cfg.config().input(0).data_type(), inference::TYPE_BF16);
    EXPECT_EQ(cfg.config().input(3).data_type(), inference::TYPE_INT32);
    EXPECT_FALSE(cfg.config().input(0).optional());
    EXPECT_TRUE(cfg.config().input(6).optional());  // custom_mask (or packed_mask)
    EXPECT_TRUE(cfg.config().input(9).optional());  // v_extend
    EXPECT_EQ(cfg.config().output(0).dims_size(), 3);
    EXPECT_EQ(cfg.config().input(2).name(), "kv_cache");
    EXPECT_EQ(cfg.config().input(2).data_type(), inference::TYPE_BF16);
    const auto params = cfg.config().parameters().find("request_parameters");
    ASSERT_NE(params, cfg.config().parameters().end());
    const std::string& listed = params->second.string_value();
    for (const char* p : {"sm_scale (required)", "k_scale", "v_scale", "kjit_kv_dtype", "kjit_fp8_numerics"}) {
      EXPECT_NE(listed.find(p), std::string::npos) << p << " not in: " << listed;
    }
  }
}

TEST_F(MetadataTest, UnknownModelIsInvalidArgument) {
  grpc::ClientContext c1, c2, c3, c4;
  inference::ModelMetadataRequest mreq;
  mreq.set_name("no_such_model");
  inference::ModelMetadataResponse md;
  EXPECT_EQ(stub_->ModelMetadata(&c1, mreq, &md).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  inference::ModelConfigRequest creq;
  creq.set_name("no_such_model");
  inference::ModelConfigResponse cfg;
  EXPECT_EQ(stub_->ModelConfig(&c2, creq, &cfg).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  inference::ModelStatisticsRequest sreq;
  sreq.set_name("no_such_model");
  inference::ModelStatisticsResponse st;
  EXPECT_EQ(stub_->ModelStatistics(&c3, sreq, &st).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  mreq.set_name("mla_verify");
  mreq.set_version("7");
  EXPECT_EQ(stub_->ModelMetadata(&c4, mreq, &md).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(MetadataTest, CompileOnlyModelsAreNotReady) {
  grpc::ClientContext c1, c2, c3;
  inference::ModelReadyRequest req;
  req.set_name("mla_verify");
  inference::ModelReadyResponse r;
  ASSERT_TRUE(stub_->ModelReady(&c1, req, &r).ok());
  EXPECT_FALSE(r.ready());
  inference::RepositoryIndexResponse idx;
  ASSERT_TRUE(stub_->RepositoryIndex(&c2, {}, &idx).ok());
  ASSERT_EQ(idx.models_size(), 2);
  EXPECT_EQ(idx.models(0).name(), "mla_verify");
  EXPECT_EQ(idx.models(1).name(), "mla_verify_naive");
  EXPECT_EQ(idx.models(0).state(), "UNAVAILABLE");
  EXPECT_NE(idx.models(0).reason().find("compile-only"), std::string::npos) << idx.models(0).reason();
  inference::RepositoryIndexRequest ready_only;
  ready_only.set_ready(true);
  ASSERT_TRUE(stub_->RepositoryIndex(&c3, ready_only, &idx).ok());
  EXPECT_EQ(idx.models_size(), 0);
}

TEST_F(MetadataTest, StatisticsListEveryModel) {
  grpc::ClientContext ctx;
  inference::ModelStatisticsResponse st;
  ASSERT_TRUE(stub_->ModelStatistics(&ctx, {}, &st).ok());
  ASSERT_EQ(st.model_stats_size(), 2);
  EXPECT_EQ(st.model_stats(1).name(), "mla_verify_naive");
}

TEST_F(MetadataTest, UnimplementedMethods) {
  grpc::ClientContext c1;
  inference::RepositoryModelLoadRequest req;
  req.set_model_name("mla_verify");
  inference::RepositoryModelLoadResponse resp;
  EXPECT_EQ(stub_->RepositoryModelLoad(&c1, req, &resp).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  grpc::ClientContext c2;
  auto stream = stub_->ModelStreamInfer(&c2);
  stream->WritesDone();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(MetadataTest, SocketAndDirectoryPermissions) {
  struct stat st;
  ASSERT_EQ(stat(daemon_->socket().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  ASSERT_EQ(stat((daemon_->dir() + "/run").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(DaemonLifecycle, SigtermExitsZeroAndRemovesSocket) {
  DaemonProcess d;
  ASSERT_TRUE(d.ok()) << d.error();
  const std::string sock = d.socket();
  EXPECT_EQ(d.Stop(), 0);
  struct stat st;
  EXPECT_NE(stat(sock.c_str(), &st), 0) << "socket left behind";
}

TEST(DaemonLifecycle, SecondDaemonOnALiveSocketRefuses) {
  DaemonProcess d;
  ASSERT_TRUE(d.ok()) << d.error();
  const std::string cmd = std::string(KJITD_PATH) + " --socket " + d.socket() + " --cache-dir " +
                          d.dir() + "/cache2 --log-level error 2>/dev/null";
  const int rc = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 1) << rc;
}

TEST(DaemonLifecycle, BadFlagExitsTwo) {
  const int rc = std::system((std::string(KJITD_PATH) + " --no-such-flag 2>/dev/null").c_str());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 2) << rc;
}

}  // namespace
}  // namespace kjit::testing
