// System shared memory windows (real POSIX objects) and the region registry: bounds with
// overflow, name space, unregister semantics, sessions, references outliving an unregister.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "runtime/ipc/cuda_ipc.h"
#include "runtime/ipc/region_registry.h"
#include "runtime/ipc/registration.h"
#include "tests/unit/shm_object.h"

namespace kjit::ipc {
namespace {

using testing::ShmObject;

std::shared_ptr<Region> SystemRegion(const std::string& name, const ShmObject& obj, uint64_t off,
                                     uint64_t size, const std::string& session = "") {
  auto shm = SystemShmRegion::Open(obj.key(), off, size);
  EXPECT_TRUE(shm.ok()) << shm.status();
  auto r = std::make_shared<Region>();
  r->name = name;
  r->session = session;
  r->system = *std::move(shm);
  return r;
}

TEST(SystemShmRegion, MapsTheWindowSharedWithTheCreator) {
  ShmObject obj(8192);
  auto r = SystemShmRegion::Open(obj.key(), 4097, 100);  // unaligned offset
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->size(), 100u);
  EXPECT_EQ((*r)->offset(), 4097u);
  obj.map()[4097] = 0x5a;
  EXPECT_EQ((*r)->data()[0], 0x5a);
  (*r)->data()[99] = 0xa5;
  EXPECT_EQ(obj.map()[4196], 0xa5);
}

TEST(SystemShmRegion, BoundsAndErrors) {
  ShmObject obj(4096);
  EXPECT_TRUE(SystemShmRegion::Open(obj.key(), 0, 4096).ok());
  EXPECT_TRUE(SystemShmRegion::Open(obj.key(), 4095, 1).ok());
  EXPECT_TRUE(SystemShmRegion::Open(obj.key().substr(1), 0, 16).ok());  // leading '/' optional
  auto code = [&](const std::string& key, uint64_t off, uint64_t size) {
    return SystemShmRegion::Open(key, off, size).status().code();
  };
  using absl::StatusCode;
  EXPECT_EQ(code(obj.key(), 4096, 1), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(obj.key(), 0, 4097), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(obj.key(), std::numeric_limits<uint64_t>::max(), 2), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(obj.key(), 2, std::numeric_limits<uint64_t>::max() - 1), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(obj.key(), 0, 0), StatusCode::kInvalidArgument);
  EXPECT_EQ(code("", 0, 1), StatusCode::kInvalidArgument);
  EXPECT_EQ(code("/a/b", 0, 1), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(obj.key() + "-gone", 0, 1), StatusCode::kNotFound);
  // shm_open stops at a NUL byte: the key must not name the object before it.
  EXPECT_EQ(code(obj.key() + std::string("\0x", 2), 0, 1), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(".", 0, 1), StatusCode::kInvalidArgument);
  EXPECT_EQ(code("/..", 0, 1), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(std::string(251, 'k'), 0, 1), StatusCode::kInvalidArgument);
  const Status dots = SystemShmRegion::Open("..", 0, 1).status();
  EXPECT_NE(dots.message().find("not '.' or '..'"), std::string::npos) << dots;
}

TEST(Registration, NamesAreBounded) {
  ShmObject obj(4096);
  RegionRegistry reg;
  const Registrant who;
  const std::string longest(kMaxRegistrationNameBytes, 'n');
  EXPECT_TRUE(RegisterSystemRegion(&reg, longest, obj.key(), 0, 64, who).ok());
  const Status s = RegisterSystemRegion(&reg, longest + "n", obj.key(), 0, 64, who);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("longer than 256 bytes"), std::string::npos) << s;
  EXPECT_LT(s.message().size(), 300u) << "the name is quoted shortened";
  EXPECT_EQ(RegisterSystemRegion(&reg, "", obj.key(), 0, 64, who).code(), absl::StatusCode::kInvalidArgument);
  // The name is checked before the handle or the device: no driver is needed to refuse it.
  const auto no_device = [](int64_t) -> StatusOr<const driver::Context*> {
    ADD_FAILURE() << "the device was resolved for a bad name";
    return absl::InternalError("unreachable");
  };
  EXPECT_EQ(RegisterCudaRegion(&reg, longest + "n", std::string(64, '\0'), 0, 64, no_device, who).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RegisterEvent(&reg, longest + "n", std::string(64, '\0'), 0, no_device, who).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RegionRegistry, NamesAreUniqueAndUnregisterIsLenient) {
  ShmObject obj(4096);
  RegionRegistry reg;
  ASSERT_TRUE(reg.AddRegion(SystemRegion("a", obj, 0, 64)).ok());
  EXPECT_EQ(reg.AddRegion(SystemRegion("a", obj, 64, 64)).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(reg.AddRegion(SystemRegion("b", obj, 64, 64)).ok());
  EXPECT_EQ(reg.FindRegion("c", "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reg.ListRegions(RegionKind::kSystem, "c", "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reg.ListRegions(RegionKind::kSystem, "", "")->size(), 2u);
  EXPECT_EQ(reg.ListRegions(RegionKind::kCuda, "", "")->size(), 0u);
  reg.RemoveRegion(RegionKind::kSystem, "c", "");  // unknown: nothing happens
  reg.RemoveRegion(RegionKind::kCuda, "a", "");    // other kind: nothing happens
  EXPECT_TRUE(reg.FindRegion("a", "").ok());
  reg.RemoveRegion(RegionKind::kSystem, "a", "");
  EXPECT_FALSE(reg.FindRegion("a", "").ok());
  reg.RemoveRegion(RegionKind::kSystem, "", "");  // all
  EXPECT_EQ(reg.ListRegions(RegionKind::kSystem, "", "")->size(), 0u);
}

TEST(RegionRegistry, AReferenceOutlivesTheUnregister) {
  ShmObject obj(4096);
  RegionRegistry reg;
  ASSERT_TRUE(reg.AddRegion(SystemRegion("a", obj, 0, 64)).ok());
  auto held = reg.FindRegion("a", "");
  ASSERT_TRUE(held.ok());
  reg.RemoveRegion(RegionKind::kSystem, "a", "");
  obj.map()[3] = 42;
  EXPECT_EQ((*held)->system->data()[3], 42);  // still mapped for the launch that holds it
  EXPECT_EQ(held->use_count(), 1);
}

TEST(RegionRegistry, SessionReleaseTakesOnlyThatSession) {
  ShmObject obj(4096);
  RegionRegistry reg;
  ASSERT_TRUE(reg.AddRegion(SystemRegion("s1a", obj, 0, 64, "s1")).ok());
  ASSERT_TRUE(reg.AddRegion(SystemRegion("s1b", obj, 64, 64, "s1")).ok());
  ASSERT_TRUE(reg.AddRegion(SystemRegion("s2", obj, 128, 64, "s2")).ok());
  ASSERT_TRUE(reg.AddRegion(SystemRegion("global", obj, 192, 64)).ok());
  EXPECT_EQ(reg.ReleaseSession("s1"), 2u);
  EXPECT_EQ(reg.ReleaseSession("s1"), 0u);
  EXPECT_TRUE(reg.FindRegion("s2", "s2").ok());
  EXPECT_TRUE(reg.FindRegion("global", "").ok());
  EXPECT_FALSE(reg.FindRegion("s1a", "s1").ok());
  reg.Clear();
  EXPECT_FALSE(reg.FindRegion("global", "").ok());
}

TEST(RegionRegistry, AnEndedSessionCannotOwnNewEntries) {
  ShmObject obj(4096);
  RegionRegistry reg;
  auto open = [](const std::string& s) { return s == "live"; };
  EXPECT_EQ(reg.AddRegion(SystemRegion("late", obj, 0, 64, "ended"), open).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(reg.FindRegion("late", "").ok());
  EXPECT_TRUE(reg.AddRegion(SystemRegion("mine", obj, 0, 64, "live"), open).ok());
  EXPECT_TRUE(reg.AddRegion(SystemRegion("global", obj, 64, 64), open).ok());  // no session: no check
  auto ev = std::make_shared<NamedEvent>();
  ev->name = "ev";
  ev->session = "ended";
  EXPECT_EQ(reg.AddEvent(ev, open).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(reg.FindEvent("ev", "").ok());
}

TEST(RegionRegistry, ASessionsEntriesAreSeenOnlyByThatSession) {
  ShmObject obj(4096);
  RegionRegistry reg;
  ASSERT_TRUE(reg.AddRegion(SystemRegion("mine", obj, 0, 64, "s1")).ok());
  ASSERT_TRUE(reg.AddRegion(SystemRegion("shared", obj, 64, 64)).ok());
  EXPECT_TRUE(reg.FindRegion("mine", "s1").ok());
  EXPECT_TRUE(reg.FindRegion("shared", "s1").ok());  // outside any session: every request sees it
  EXPECT_TRUE(reg.FindRegion("shared", "s2").ok());
  for (const std::string other : {"", "s2"}) {
    auto r = reg.FindRegion("mine", other);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << other;
    EXPECT_NE(r.status().message().find("session"), std::string::npos) << r.status();
    EXPECT_EQ(reg.ListRegions(RegionKind::kSystem, "mine", other).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(reg.ListRegions(RegionKind::kSystem, "", other)->size(), 1u);  // "shared" only
    reg.RemoveRegion(RegionKind::kSystem, "mine", other);  // unseen: nothing happens
    reg.RemoveRegion(RegionKind::kSystem, "", other);      // removes "shared" at most
    EXPECT_TRUE(reg.FindRegion("mine", "s1").ok()) << other;
    ASSERT_TRUE(reg.HasRegion("", "shared") || reg.AddRegion(SystemRegion("shared", obj, 64, 64)).ok());
  }
  // The name space stays one: another session cannot take the name either.
  EXPECT_EQ(reg.AddRegion(SystemRegion("mine", obj, 128, 64, "s2")).code(), absl::StatusCode::kAlreadyExists);
  auto ev = std::make_shared<NamedEvent>();
  ev->name = "ev";
  ev->session = "s1";
  ASSERT_TRUE(reg.AddEvent(ev).ok());
  EXPECT_TRUE(reg.FindEvent("ev", "s1").ok());
  EXPECT_EQ(reg.FindEvent("ev", "s2").status().code(), absl::StatusCode::kNotFound);
  reg.RemoveEvent("ev", "s2");
  EXPECT_TRUE(reg.FindEvent("ev", "s1").ok());
  reg.RemoveEvent("ev", "s1");
  EXPECT_FALSE(reg.HasEvent("", "ev"));
}

// Outside a session an entry belongs to its registrant's identity (the Unix user, or TCP): another
// user's requests, in a session or not, can neither use, list nor unregister it, nor its events.
TEST(RegionRegistry, ASessionlessEntryIsSeenOnlyByItsRegistrantsIdentity) {
  ShmObject obj(4096);
  RegionRegistry reg;
  auto alice = SystemRegion("alice_region", obj, 0, 64);
  alice->owner = "uid:1000";
  ASSERT_TRUE(reg.AddRegion(alice).ok());
  auto ev = std::make_shared<NamedEvent>();
  ev->name = "alice_event";
  ev->owner = "uid:1000";
  ASSERT_TRUE(reg.AddEvent(ev).ok());
  for (const Scope& own : {Scope("", "uid:1000"), Scope("s1", "uid:1000")}) {
    EXPECT_TRUE(reg.FindRegion("alice_region", own).ok()) << own.session;
    EXPECT_EQ(reg.ListRegions(RegionKind::kSystem, "", own)->size(), 1u);
    EXPECT_TRUE(reg.FindEvent("alice_event", own).ok());
  }
  for (const Scope& other : {Scope("", "uid:1001"), Scope("s2", "uid:1001"), Scope("", "tcp"), Scope("", "")}) {
    auto r = reg.FindRegion("alice_region", other);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << other.owner;
    EXPECT_EQ(std::string(r.status().message()), "shared memory region 'alice_region' is not registered");
    EXPECT_EQ(reg.ListRegions(RegionKind::kSystem, "alice_region", other).status().code(), absl::StatusCode::kNotFound);
    EXPECT_TRUE(reg.ListRegions(RegionKind::kSystem, "", other)->empty());
    EXPECT_EQ(reg.FindEvent("alice_event", other).status().code(), absl::StatusCode::kNotFound);
    reg.RemoveRegion(RegionKind::kSystem, "alice_region", other);
    reg.RemoveRegion(RegionKind::kSystem, "", other);
    reg.RemoveEvent("alice_event", other);
    EXPECT_TRUE(reg.HasRegion("uid:1000", "alice_region")) << other.owner;
    EXPECT_TRUE(reg.HasEvent("uid:1000", "alice_event")) << other.owner;
  }
  reg.RemoveRegion(RegionKind::kSystem, "", Scope("", "uid:1000"));
  reg.RemoveEvent("alice_event", Scope("s1", "uid:1000"));
  EXPECT_FALSE(reg.HasRegion("uid:1000", "alice_region"));
  EXPECT_FALSE(reg.HasEvent("uid:1000", "alice_event"));
  EXPECT_TRUE(RegionRegistry::Sees(Scope("s1", "uid:1"), "s1", "uid:2"));  // a session's entry: by session
  EXPECT_FALSE(RegionRegistry::Sees(Scope("", "uid:1"), "s1", "uid:1"));
}

// Names are per identity: another user can take neither a name before its owner (ALREADY_EXISTS)
// nor learn that it is in use; each identity's requests see only their own entry by that name.
TEST(RegionRegistry, EachIdentityHasANameSpaceOfItsOwn) {
  ShmObject obj(4096);
  RegionRegistry reg;
  auto region = [&](uint64_t offset, const char* owner, const char* session = "") {
    auto r = SystemRegion("input0", obj, offset, 64, session);
    r->owner = owner;
    return r;
  };
  auto event = [](const char* owner) {
    auto e = std::make_shared<NamedEvent>();
    e->name = "done";
    e->owner = owner;
    return e;
  };
  ASSERT_TRUE(reg.AddRegion(region(0, "uid:1000")).ok());
  ASSERT_TRUE(reg.AddRegion(region(64, "uid:1001")).ok());
  ASSERT_TRUE(reg.AddRegion(region(128, "tcp")).ok());
  ASSERT_TRUE(reg.AddEvent(event("uid:1000")).ok());
  ASSERT_TRUE(reg.AddEvent(event("uid:1001")).ok());
  // Within one identity a name is still one entry, in a session or not.
  EXPECT_EQ(reg.AddRegion(region(192, "uid:1000")).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(reg.AddRegion(region(192, "uid:1000", "s1")).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(reg.AddEvent(event("uid:1000")).code(), absl::StatusCode::kAlreadyExists);
  const std::pair<const char*, uint64_t> users[] = {{"uid:1000", 0}, {"uid:1001", 64}, {"tcp", 128}};
  for (const auto& [owner, offset] : users) obj.map()[offset] = static_cast<uint8_t>(1 + offset / 64);
  for (const auto& [owner, offset] : users) {
    for (const Scope& scope : {Scope("", owner), Scope("s9", owner)}) {
      auto r = reg.FindRegion("input0", scope);
      ASSERT_TRUE(r.ok()) << owner;
      EXPECT_EQ((*r)->owner, owner);
      EXPECT_EQ((*r)->system->data()[0], 1 + offset / 64) << owner;  // its own window
      auto listed = reg.ListRegions(RegionKind::kSystem, "", scope);
      ASSERT_EQ(listed->size(), 1u) << owner;
      EXPECT_EQ((*listed)[0]->owner, owner);
    }
  }
  EXPECT_EQ((*reg.FindEvent("done", Scope("", "uid:1001")))->owner, "uid:1001");
  EXPECT_EQ(reg.FindEvent("done", Scope("", "tcp")).status().code(), absl::StatusCode::kNotFound);
  // One user unregistering its name leaves the others' entries by that name.
  reg.RemoveRegion(RegionKind::kSystem, "input0", Scope("", "uid:1001"));
  reg.RemoveEvent("done", Scope("", "uid:1001"));
  EXPECT_FALSE(reg.HasRegion("uid:1001", "input0"));
  EXPECT_FALSE(reg.HasEvent("uid:1001", "done"));
  EXPECT_TRUE(reg.FindRegion("input0", Scope("", "uid:1000")).ok());
  EXPECT_TRUE(reg.FindRegion("input0", Scope("", "tcp")).ok());
  EXPECT_TRUE(reg.FindEvent("done", Scope("", "uid:1000")).ok());
  EXPECT_EQ(reg.Count().system_regions, 2u);
}

TEST(RegionRegistry, EntriesAreCapped) {
  ShmObject obj(4096);
  RegionRegistry reg;
  reg.SetMaxEntries(3);
  ASSERT_TRUE(reg.AddRegion(SystemRegion("a", obj, 0, 64)).ok());
  ASSERT_TRUE(reg.AddRegion(SystemRegion("b", obj, 0, 64)).ok());
  auto ev = std::make_shared<NamedEvent>();
  ev->name = "e";
  ASSERT_TRUE(reg.AddEvent(ev).ok());
  const Status full = reg.AddRegion(SystemRegion("c", obj, 0, 64));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("--max-regions"), std::string::npos) << full;
  auto ev2 = std::make_shared<NamedEvent>();
  ev2->name = "e2";
  EXPECT_EQ(reg.AddEvent(ev2).code(), absl::StatusCode::kResourceExhausted);
  reg.RemoveRegion(RegionKind::kSystem, "a", "");
  EXPECT_TRUE(reg.AddRegion(SystemRegion("c", obj, 0, 64)).ok());  // room again
}

// One user may hold three quarters of each limit, so that another always finds room; callers
// without an identity are held to the limit alone.
TEST(RegionRegistry, OneIdentityHoldsAtMostThreeQuartersOfALimit) {
  ShmObject obj(4096);
  RegionRegistry reg;
  reg.SetMaxEntries(8);
  reg.SetMaxSystemBytes(1024);
  auto owned = [&](const std::string& name, uint64_t bytes, const std::string& owner) {
    auto r = SystemRegion(name, obj, 0, bytes);
    r->owner = owner;
    return reg.AddRegion(r);
  };
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(owned("a" + std::to_string(i), 64, "uid:1000").ok()) << i;
  auto ev = std::make_shared<NamedEvent>();
  ev->name = "a_event";
  ev->owner = "uid:1000";
  ASSERT_TRUE(reg.AddEvent(ev).ok());  // 6 of 8: its share
  const Status entries = owned("a6", 64, "uid:1000");
  EXPECT_EQ(entries.code(), absl::StatusCode::kResourceExhausted) << entries;
  EXPECT_NE(entries.message().find("three quarters of kjitd's limit of 8 (--max-regions"), std::string::npos)
      << entries;
  auto ev2 = std::make_shared<NamedEvent>();
  ev2->name = "a_event2";
  ev2->owner = "uid:1000";
  EXPECT_EQ(reg.AddEvent(ev2).code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(owned("b0", 64, "uid:1001").ok()) << "another user finds room";
  ASSERT_TRUE(owned("b1", 64, "uid:1001").ok());
  EXPECT_NE(owned("b2", 64, "uid:1001").message().find("its limit (--max-regions)"), std::string::npos);

  // Bytes: uid:1000 holds 5 x 64 = 320 of its 768; 448 more fit, 449 do not.
  reg.Clear();
  reg.SetMaxEntries(100);
  ASSERT_TRUE(owned("a", 320, "uid:1000").ok());
  ASSERT_TRUE(owned("b", 448, "uid:1000").ok());
  const Status bytes = owned("c", 64, "uid:1000");
  EXPECT_EQ(bytes.code(), absl::StatusCode::kResourceExhausted) << bytes;
  EXPECT_NE(bytes.message().find("three quarters of kjitd's limit of 1024 (--max-system-shm-bytes"),
            std::string::npos)
      << bytes;
  EXPECT_TRUE(owned("d", 256, "uid:1001").ok()) << "the last quarter is another user's";
  reg.Clear();
  EXPECT_TRUE(owned("e", 1024, "").ok()) << "no identity: the limit alone";
}

// Bytes of system shared memory are capped across all registrants, and freed by every way out:
// unregister, a session's release, Clear. A sparse object of 1 TiB costs no memory, but mapping it
// takes the address space: refused before it is mapped.
TEST(RegionRegistry, SystemBytesAreCappedBeforeMapping) {
  ShmObject obj(4096);
  RegionRegistry reg;
  reg.SetMaxSystemBytes(256);
  ASSERT_TRUE(reg.AddRegion(SystemRegion("a", obj, 0, 128)).ok());
  ASSERT_TRUE(reg.AddRegion(SystemRegion("b", obj, 0, 64, "s")).ok());
  const Status full = reg.AddRegion(SystemRegion("c", obj, 0, 128));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_NE(full.message().find("--max-system-shm-bytes"), std::string::npos) << full;
  EXPECT_TRUE(reg.CheckSystemRoom(64).ok());
  EXPECT_EQ(reg.CheckSystemRoom(65).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(reg.CheckSystemRoom(std::numeric_limits<uint64_t>::max()).code(), absl::StatusCode::kResourceExhausted);
  reg.RemoveRegion(RegionKind::kSystem, "a", "");
  EXPECT_TRUE(reg.AddRegion(SystemRegion("c", obj, 0, 128)).ok());  // a's bytes are free again
  EXPECT_EQ(reg.ReleaseSession("s"), 1u);
  EXPECT_TRUE(reg.CheckSystemRoom(128).ok());  // and b's
  reg.Clear();
  EXPECT_TRUE(reg.CheckSystemRoom(256).ok());

  // Through the registration path: the window is refused before any mapping.
  ShmObject sparse(4096);
  sparse.Resize(size_t{1} << 40);  // 1 TiB, no pages
  reg.SetMaxSystemBytes(uint64_t{1} << 30);
  const Registrant who;
  const Status huge = RegisterSystemRegion(&reg, "huge", sparse.key(), 0, uint64_t{1} << 40, who);
  EXPECT_EQ(huge.code(), absl::StatusCode::kResourceExhausted) << huge;
  EXPECT_NE(huge.message().find("'huge'"), std::string::npos) << huge;
  EXPECT_TRUE(RegisterSystemRegion(&reg, "fits", sparse.key(), 0, uint64_t{1} << 20, who).ok());
}

// The owner / group / other rule a client's own open would meet, on a stat the test makes up.
TEST(SystemShmRegion, PeerMayOpenOnlyWhatItCouldOpenItself) {
  struct stat st{};
  st.st_uid = 1000;
  st.st_gid = 2000;
  auto may = [&](uid_t uid, gid_t gid, std::vector<gid_t> groups, mode_t mode) {
    st.st_mode = S_IFREG | mode;
    return PeerMayOpenReadWrite(PeerCredentials{uid, gid, std::move(groups)}, st, "object").code();
  };
  using absl::StatusCode;
  EXPECT_EQ(may(1000, 1, {}, 0600), StatusCode::kOk);
  EXPECT_EQ(may(1000, 1, {}, 0400), StatusCode::kPermissionDenied);  // read-only for its owner: kjitd maps rw
  EXPECT_EQ(may(1000, 2000, {}, 0066), StatusCode::kPermissionDenied);  // the owner class decides, as in the kernel
  EXPECT_EQ(may(1001, 1, {}, 0600), StatusCode::kPermissionDenied);  // another user's 0600 object
  EXPECT_EQ(may(1001, 2000, {}, 0660), StatusCode::kOk);
  EXPECT_EQ(may(1001, 1, {7, 2000}, 0660), StatusCode::kOk);  // a supplementary group
  EXPECT_EQ(may(1001, 1, {7}, 0660), StatusCode::kPermissionDenied);
  EXPECT_EQ(may(1001, 1, {}, 0666), StatusCode::kOk);
  EXPECT_EQ(may(1001, 2000, {}, 0606), StatusCode::kPermissionDenied);  // group class, no group bits
  EXPECT_EQ(may(0, 0, {}, 0600), StatusCode::kOk);  // root
  st.st_mode = S_IFREG | 0600;
  const Status s = PeerMayOpenReadWrite(PeerCredentials{1001, 1, {}}, st, "shared memory key 'k'");
  EXPECT_NE(s.message().find("uid 1001"), std::string::npos) << s;
}

TEST(SystemShmRegion, OpenChecksThePeerOnTheOpenedObject) {
  ShmObject obj(4096);  // ours, 0600
  PeerCredentials me{getuid(), getgid(), {}};
  EXPECT_TRUE(SystemShmRegion::Open(obj.key(), 0, 64, &me).ok());
  PeerCredentials other{getuid() == 65534 ? 65533u : 65534u, 65534, {}};  // mode 0600: no one else
  EXPECT_EQ(SystemShmRegion::Open(obj.key(), 0, 64, &other).status().code(), absl::StatusCode::kPermissionDenied);
}

// Whether users other than the client could write the object (a launch ring refuses such memory):
// its mode's group and other write bits, and its owner against the client (kjitd's own user for a
// client without credentials).
TEST(SystemShmRegion, SaysWhetherOthersMayWriteTheObject) {
  ShmObject obj(4096);  // ours, 0600
  const std::string path = "/dev/shm" + obj.key();
  PeerCredentials me{getuid(), getgid(), {}};
  auto others = [&](const PeerCredentials* as) {
    auto r = SystemShmRegion::Open(obj.key(), 0, 64, as);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && (*r)->others_may_write();
  };
  EXPECT_FALSE(others(&me));
  EXPECT_FALSE(others(nullptr));
  for (const mode_t mode : {0620, 0602, 0666}) {
    ASSERT_EQ(chmod(path.c_str(), mode), 0);
    EXPECT_TRUE(others(&me)) << std::oct << mode;
    EXPECT_TRUE(others(nullptr)) << std::oct << mode;
  }
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);  // others may read, not write
  EXPECT_FALSE(others(&me));
  if (getuid() == 0) {  // root may register another user's object; that user may write it
    PeerCredentials root_client{0, 0, {}};
    ASSERT_EQ(chown(path.c_str(), 65534, 65534), 0);
    EXPECT_TRUE(others(&root_client));
  }
}

// An access ACL can deny a named user what the mode bits grant to "other": kjitd, which does not
// evaluate ACLs, lets only the owner (and root) register such an object.
TEST(SystemShmRegion, AnObjectWithAnAclIsForItsOwnerOnly) {
  // The rule, on a stat the test makes up; then on a real object, where the file system takes ACLs.
  struct stat st{};
  st.st_uid = 1000;
  st.st_mode = S_IFREG | 0666;
  EXPECT_EQ(PeerMayOpenReadWrite(PeerCredentials{1000, 1, {}}, st, "o", true).code(), absl::StatusCode::kOk);
  EXPECT_EQ(PeerMayOpenReadWrite(PeerCredentials{1001, 1, {}}, st, "o", true).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(PeerMayOpenReadWrite(PeerCredentials{1001, 1, {}}, st, "o", false).code(), absl::StatusCode::kOk);
  ShmObject obj(4096);
  const std::string path = "/dev/shm" + obj.key();
  ASSERT_EQ(chmod(path.c_str(), 0666), 0);
  const uid_t denied = getuid() == 65534 ? 65533u : 65534u;
  // struct posix_acl_xattr_header {u32 version = 2}, then {u16 tag, u16 perm, u32 id} entries:
  // owner rw, user `denied` nothing, group rw, mask rw, other rw.
  struct Entry {
    uint16_t tag, perm;
    uint32_t id;
  };
  const uint32_t version = 2;
  const Entry entries[] = {{0x01, 6, ~0u}, {0x02, 0, denied}, {0x04, 6, ~0u}, {0x10, 6, ~0u}, {0x20, 6, ~0u}};
  std::string acl(reinterpret_cast<const char*>(&version), sizeof(version));
  acl.append(reinterpret_cast<const char*>(entries), sizeof(entries));
  if (setxattr(path.c_str(), "system.posix_acl_access", acl.data(), acl.size(), 0) != 0) {
    GTEST_SKIP() << "this file system takes no POSIX ACLs (" << std::strerror(errno) << ")";
  }
  PeerCredentials owner{getuid(), getgid(), {}}, other{denied, 65534, {}};
  EXPECT_TRUE(SystemShmRegion::Open(obj.key(), 0, 64, &owner).ok());
  const Status s = SystemShmRegion::Open(obj.key(), 0, 64, &other).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("POSIX ACL"), std::string::npos) << s;
}

TEST(CudaIpc, HandleSizeIsCheckedBeforeTheDriver) {
  EXPECT_EQ(CudaIpcRegion::Open(std::string(63, '\0'), 0, 16).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaIpcEvent::Open(std::string(65, '\0'), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaIpcRegion::Open(std::string(64, '\0'), 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kjit::ipc
