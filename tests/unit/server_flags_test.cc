// kjitd's flags and socket path rules (PROTOCOL.md "Transport").
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <tuple>

#include "runtime/server/flags.h"
#include "runtime/server/grpc_status.h"
#include "runtime/server/token.h"

namespace kjit::server {
namespace {

StatusOr<Flags> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "kjitd");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return ParseFlags(static_cast<int>(argv.size()), argv.data());
}

TEST(Flags, ParsesEveryFlagInBothForms) {
  auto f = Parse({"--socket", "/tmp/x.sock", "--listen=127.0.0.1:8001", "--cache-dir", "/c",
                  "--arch", "sm_120,sm_90", "--arch=sm_100", "--log-level", "debug", "--ring-spin-us=5000"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->socket, "/tmp/x.sock");
  EXPECT_EQ(f->listen, "127.0.0.1:8001");
  EXPECT_EQ(f->cache_dir, "/c");
  EXPECT_EQ(f->archs, (std::vector<std::string>{"sm_120", "sm_90", "sm_100"}));
  EXPECT_EQ(f->log_level, "debug");
  EXPECT_EQ(f->ring_spin_us, 5000);
  EXPECT_FALSE(f->help);
}

TEST(Flags, DefaultsAndErrors) {
  auto f = Parse({});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->socket, DefaultSocketPath());
  EXPECT_TRUE(f->listen.empty());  // TCP only when asked
  EXPECT_TRUE(Parse({"--help"})->help);
  EXPECT_EQ(Parse({"--bogus"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Parse({"--socket"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Parse({"--arch", "90"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Parse({"--log-level", "loud"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f->ring_spin_us, 200);
  for (const char* bad : {"-1", "abc", "1.5", "10000001"})
    EXPECT_EQ(Parse({"--ring-spin-us", bad}).status().code(), absl::StatusCode::kInvalidArgument) << bad;
}

TEST(Flags, LaunchTimeoutMs) {
  EXPECT_EQ(Parse({})->launch_timeout_ms, 10000);
  auto f = Parse({"--launch-timeout-ms=1500"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->launch_timeout_ms, 1500);
  for (const char* bad : {"0", "-1", "3600001", "1s", ""}) {
    EXPECT_EQ(Parse({"--launch-timeout-ms", bad}).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(Flags, MaxSystemShmBytes) {
  EXPECT_EQ(Parse({})->max_system_shm_bytes, int64_t{64} << 30);
  auto f = Parse({"--max-system-shm-bytes=1048576"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->max_system_shm_bytes, 1048576);
  for (const char* bad : {"0", "4095", "-5", "70368744177665", "1e9"}) {
    EXPECT_EQ(Parse({"--max-system-shm-bytes", bad}).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(Usage().find("--max-system-shm-bytes"), std::string::npos);
}

TEST(Flags, MaxGrpcMemoryBytes) {
  // By default a few requests of the largest size, at least 2 GiB.
  EXPECT_EQ(GrpcMemoryBytes(*Parse({})), int64_t{2} << 30);
  EXPECT_EQ(GrpcMemoryBytes(*Parse({"--max-request-bytes=1073741824"})), int64_t{4} << 30);
  auto f = Parse({"--max-grpc-memory-bytes", "268435456"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(GrpcMemoryBytes(*f), int64_t{256} << 20);
  for (const char* bad : {"0", "67108863", "-1", "1e9", "70368744177665"}) {
    EXPECT_EQ(Parse({"--max-grpc-memory-bytes", bad}).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  // Below the largest request: one such request could never be received.
  const auto below = Parse({"--max-grpc-memory-bytes=100000000", "--max-request-bytes=134217728"});
  EXPECT_EQ(below.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(below.status().message().find("--max-request-bytes"), std::string::npos) << below.status();
  EXPECT_NE(Usage().find("--max-grpc-memory-bytes"), std::string::npos);
}

TEST(Flags, DefaultSocketPathFollowsXdgRuntimeDir) {
  const char* old = getenv("XDG_RUNTIME_DIR");
  const std::string saved = old ? old : "";
  setenv("XDG_RUNTIME_DIR", "/run/user/1234", 1);
  EXPECT_EQ(DefaultSocketPath(), "/run/user/1234/kjit/kjitd.sock");
  unsetenv("XDG_RUNTIME_DIR");
  const std::string fallback = DefaultSocketPath();
  EXPECT_TRUE(fallback == "/run/kjit/kjitd.sock" ||
              fallback == "/tmp/kjit-" + std::to_string(getuid()) + "/kjitd.sock") << fallback;
  if (old) setenv("XDG_RUNTIME_DIR", saved.c_str(), 1);
}

TEST(Flags, PrepareSocketPathCreatesAPrivateDirectory) {
  char tmpl[] = "/tmp/kjit-flags-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string sock = std::string(tmpl) + "/kjit/kjitd.sock";
  ASSERT_TRUE(PrepareSocketPath(sock).ok());
  struct stat st;
  ASSERT_EQ(stat((std::string(tmpl) + "/kjit").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_TRUE(SocketIsPrivate(sock));
  for (const mode_t open_to : {0710, 0701, 0750}) {  // a group or others may enter: not private
    ASSERT_EQ(chmod((std::string(tmpl) + "/kjit").c_str(), open_to), 0);
    EXPECT_FALSE(SocketIsPrivate(sock)) << std::oct << open_to;
  }
  ASSERT_EQ(chmod((std::string(tmpl) + "/kjit").c_str(), 0700), 0);
  EXPECT_FALSE(SocketIsPrivate(std::string(tmpl) + "/absent/kjitd.sock"));
  // A regular file where the socket goes is refused, never deleted.
  FILE* f = fopen(sock.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  EXPECT_EQ(PrepareSocketPath(sock).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(std::filesystem::exists(sock));
  EXPECT_EQ(PrepareSocketPath(std::string(200, 'x')).code(), absl::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(tmpl);
}

// An invalid port used to bind some other port and log the one asked for.
TEST(Flags, ListenMustBeHostAndAPortInRange) {
  for (const char* bad : {"127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1:", "127.0.0.1", ":8001", "127.0.0.1:80a",
                          "127.0.0.1:-1", "127.0.0.1:0000008001"}) {
    auto f = Parse({"--listen", bad});
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(f.status().message().find("--listen"), std::string::npos) << f.status();
  }
  for (const char* good : {"127.0.0.1:8001", "[::1]:1", "0.0.0.0:65535", "localhost:8001"}) {
    EXPECT_TRUE(Parse({"--listen", good}).ok()) << good;
  }
  EXPECT_TRUE(IsLoopbackListen("127.0.0.1:8001"));
  EXPECT_TRUE(IsLoopbackListen("[::1]:8001"));
  EXPECT_TRUE(IsLoopbackListen("localhost:8001"));
  EXPECT_FALSE(IsLoopbackListen("0.0.0.0:8001"));
  EXPECT_FALSE(IsLoopbackListen("10.0.0.2:8001"));
}

// --metrics-listen is off by default and validated as --listen is; civetweb binds numeric
// addresses only, so a host name other than localhost is refused here rather than at bind time.
TEST(Flags, MetricsListenIsOffByDefaultAndNumeric) {
  auto none = Parse({});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->metrics_listen.empty());
  auto f = Parse({"--metrics-listen=127.0.0.1:8002"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->metrics_listen, "127.0.0.1:8002");
  EXPECT_EQ(Parse({"--metrics-listen", "localhost:8002"})->metrics_listen, "127.0.0.1:8002");
  EXPECT_EQ(Parse({"--metrics-listen", "[::1]:8002"})->metrics_listen, "[::1]:8002");
  EXPECT_EQ(Parse({"--metrics-listen", "0.0.0.0:8002"})->metrics_listen, "0.0.0.0:8002");
  for (const char* bad : {"127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1", ":8002", "8002", "127.0.0.1:80a",
                          "metrics.example:8002", "[::1:8002", "[zz]:8002", "127.0.0.256:8002"}) {
    auto r = Parse({"--metrics-listen", bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("--metrics-listen"), std::string::npos) << r.status();
  }
  EXPECT_EQ(Parse({"--metrics-listen"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Usage().find("--metrics-listen"), std::string::npos);
}

// A socket directory reached through a symbolic link another user owns is refused: that user could
// later point it at a listener of their own. So is one every user may write without the sticky bit.
TEST(Flags, PrepareSocketPathRefusesAnotherUsersSymlinkAndWorldWritableDirectories) {
  char tmpl[] = "/tmp/kjit-flags-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string real = std::string(tmpl) + "/real", link = std::string(tmpl) + "/link";
  ASSERT_EQ(mkdir(real.c_str(), 0700), 0);
  ASSERT_EQ(symlink(real.c_str(), link.c_str()), 0);
  EXPECT_TRUE(PrepareSocketPath(link + "/kjitd.sock").ok());  // our own link to our own directory
  if (getuid() == 0) {  // only root can give a link away
    ASSERT_EQ(lchown(link.c_str(), 4242, 4242), 0);
    const Status s = PrepareSocketPath(link + "/kjitd.sock");
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("symbolic link owned by another user"), std::string::npos) << s;
    ASSERT_EQ(chown(real.c_str(), 4242, 4242), 0);  // the directory itself, not ours
    EXPECT_EQ(PrepareSocketPath(real + "/kjitd.sock").code(), absl::StatusCode::kFailedPrecondition);
    ASSERT_EQ(chown(real.c_str(), 0, 0), 0);
  }
  ASSERT_EQ(chmod(real.c_str(), 0777), 0);
  EXPECT_EQ(PrepareSocketPath(real + "/kjitd.sock").code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(chmod(real.c_str(), 01777), 0);  // sticky, as /tmp
  EXPECT_TRUE(PrepareSocketPath(real + "/kjitd.sock").ok());
  std::filesystem::remove_all(tmpl);
}

TEST(Flags, ReflectionIsServedToOthersOnlyWhenAsked) {
  // gRPC parses reflection's requests whole and without the token: by default only a daemon that
  // no one but its own user can call (no TCP, a private socket directory) serves it.
  EXPECT_EQ(Parse({})->reflection, "auto");
  EXPECT_TRUE(ReflectionServed(*Parse({}), true));
  EXPECT_FALSE(ReflectionServed(*Parse({}), false));
  EXPECT_FALSE(ReflectionServed(*Parse({"--listen", "127.0.0.1:8001"}), true));
  EXPECT_TRUE(ReflectionServed(*Parse({"--listen", "127.0.0.1:8001", "--reflection", "on"}), false));
  EXPECT_FALSE(ReflectionServed(*Parse({"--reflection=off"}), true));
  EXPECT_TRUE(ReflectionServed(*Parse({"--reflection=auto"}), true));
  for (const char* bad : {"", "yes", "ON", "1"}) {
    auto f = Parse({"--reflection", bad});
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(f.status().message().find("auto, on or off"), std::string::npos) << f.status();
  }
  EXPECT_EQ(Parse({"--reflection"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Usage().find("--reflection auto|on|off"), std::string::npos);
}

TEST(Flags, TokenFileAndFaultInjection) {
  auto f = Parse({"--token-file", "/etc/kjit/token", "--enable-fault-injection"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->token_file, "/etc/kjit/token");
  EXPECT_TRUE(f->enable_fault_injection);
  EXPECT_EQ(Parse({"--token-file=/t"})->token_file, "/t");
  auto d = Parse({});
  EXPECT_TRUE(d->token_file.empty());
  EXPECT_FALSE(d->enable_fault_injection);  // off unless asked
  EXPECT_EQ(Parse({"--token-file"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Parse({"--token-file="}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Parse({"--enable-fault-injection=1"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Usage().find("--token-file"), std::string::npos);
  EXPECT_NE(Usage().find("TEST ONLY"), std::string::npos);
}

TEST(Token, ReadTokenFileChecksModeAndContent) {
  const std::string dir = ::testing::TempDir() + "/kjit-token-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& text, mode_t mode) {
    const std::string path = dir + "/token";
    std::filesystem::remove(path);
    FILE* f = std::fopen(path.c_str(), "w");
    std::fputs(text.c_str(), f);
    std::fclose(f);
    chmod(path.c_str(), mode);
    return path;
  };
  auto ok = ReadTokenFile(write("0123456789abcdef\r\n", 0600));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, "0123456789abcdef");
  EXPECT_TRUE(ReadTokenFile(write("0123456789abcdef", 0400)).ok());
  for (auto [text, mode, why] : {std::tuple{"0123456789abcdef\n", 0644, "chmod 600"},
                                 std::tuple{"0123456789abcdef\n", 0606, "chmod 600"},
                                 std::tuple{"\n\n", 0600, "empty"}, std::tuple{"short", 0600, "at least 16"},
                                 std::tuple{"0123456789 abcdef", 0600, "printable"}}) {
    auto s = ReadTokenFile(write(text, static_cast<mode_t>(mode)));
    EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << text;
    EXPECT_NE(s.status().message().find(why), absl::string_view::npos) << s.status();
    EXPECT_EQ(s.status().message().find(text), absl::string_view::npos) << "the message quotes the file";
  }
  EXPECT_NE(ReadTokenFile(dir + "/missing").status().message().find("cannot open"), absl::string_view::npos);
  EXPECT_NE(ReadTokenFile(dir).status().message().find("not a regular file"), absl::string_view::npos);
  std::filesystem::remove_all(dir);
}

TEST(Token, MatchesOnlyTheWholeToken) {
  EXPECT_TRUE(TokenMatches("0123456789abcdef", "0123456789abcdef"));
  EXPECT_FALSE(TokenMatches("0123456789abcdeF", "0123456789abcdef"));
  EXPECT_FALSE(TokenMatches("0123456789abcde", "0123456789abcdef"));
  EXPECT_FALSE(TokenMatches("0123456789abcdef0", "0123456789abcdef"));
  EXPECT_FALSE(TokenMatches("0123456789abcdef0123456789abcdef", "0123456789abcdef"));  // the token twice
  EXPECT_FALSE(TokenMatches("", "0123456789abcdef"));
  EXPECT_FALSE(TokenMatches("", ""));  // no token configured matches nothing
}

TEST(GrpcStatus, CodesMapOneToOne) {
  EXPECT_TRUE(ToGrpc(absl::OkStatus()).ok());
  EXPECT_EQ(ToGrpc(absl::NotFoundError("x")).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ToGrpc(absl::AlreadyExistsError("x")).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(ToGrpc(absl::FailedPreconditionError("x")).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ToGrpc(absl::UnimplementedError("x")).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  const grpc::Status s = ToGrpc(absl::InvalidArgumentError("tensor 'q': bad"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "tensor 'q': bad");
}

}  // namespace
}  // namespace kjit::server
