// Opening a cache: where it lives, how big it may grow, and whether the disk tier works at all.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "jit_cache/cache_impl.h"
#include "runtime/common/log.h"

namespace kjit::cache {
namespace {

constexpr uint64_t kDefaultMaxBytes = uint64_t{1} << 30;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// "" when no directory can be named (no $HOME either).
std::string ResolveDir(const std::string& requested) {
  if (!requested.empty()) return requested;
  if (std::string d = Env("KJIT_CACHE_DIR"); !d.empty()) return d;
  if (std::string x = Env("XDG_CACHE_HOME"); !x.empty()) return x + "/kjit";
  if (std::string h = Env("HOME"); !h.empty()) return h + "/.cache/kjit";
  return "";
}

// Creates the directories and proves a file can be written, synced and removed there.
Status ProbeWritable(const CubinCache::Impl& impl) {
  std::error_code ec;
  std::filesystem::create_directories(impl.locks_dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", impl.locks_dir, ": ", ec.message()));
  std::string probe = impl.entries_dir + "/.probe-XXXXXX";
  int raw = mkostemp(probe.data(), O_CLOEXEC);
  if (raw < 0) return internal::ErrnoStatus(errno, "create file in", impl.entries_dir);
  internal::UniqueFd fd(raw);
  Status s = internal::WriteAll(fd.get(), "kjit", probe);
  if (s.ok() && fsync(fd.get()) != 0) s = internal::ErrnoStatus(errno, "fsync", probe);
  unlink(probe.c_str());
  return s;
}

// A directory this process can list and open files in.
bool Readable(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  close(fd);
  return access(dir.c_str(), R_OK | X_OK) == 0;
}

}  // namespace

CubinCache::CubinCache(std::unique_ptr<Impl> impl, uint64_t max_bytes)
    : impl_(std::move(impl)), max_bytes_(max_bytes) {}
CubinCache::~CubinCache() = default;

std::unique_ptr<CubinCache> CubinCache::Open(Options opts) {
  auto impl = std::make_unique<Impl>();
  impl->dir = ResolveDir(opts.dir);
  impl->entries_dir = impl->dir + "/v1";
  impl->locks_dir = impl->entries_dir + "/locks";

  uint64_t max_bytes = opts.max_bytes;
  std::string warning;
  if (max_bytes == 0) {
    max_bytes = kDefaultMaxBytes;
    if (std::string env = Env("KJIT_CACHE_MAX_BYTES"); !env.empty()) {
      uint64_t v = 0;
      if (absl::SimpleAtoi(env, &v) && v > 0) {
        max_bytes = v;
      } else {
        warning = absl::StrCat("ignoring KJIT_CACHE_MAX_BYTES='", env, "' (not a positive integer); ");
      }
    }
  }

  if (opts.memory_only) {
    impl->memory_only = true;
  } else if (impl->dir.empty()) {
    impl->memory_only = true;
    absl::StrAppend(&warning, "no cache directory (KJIT_CACHE_DIR, XDG_CACHE_HOME and HOME unset); "
                              "caching in memory only");
  } else if (Status s = ProbeWritable(*impl); !s.ok()) {
    if (Readable(impl->entries_dir)) {
      impl->read_only = true;
      absl::StrAppend(&warning, "cache directory ", impl->dir, " is not writable (", s.message(),
                      "); reading its entries, keeping new ones in memory");
    } else {
      impl->memory_only = true;
      absl::StrAppend(&warning, "cache directory ", impl->dir, " is not usable (", s.message(),
                      "); caching in memory only");
    }
  }
  impl->warning = warning;
  return std::unique_ptr<CubinCache>(new CubinCache(std::move(impl), max_bytes));
}

void CubinCache::Impl::Note(const std::string& topic, std::string line) {
  constexpr size_t kMaxTopics = 1024;  // beyond this, problems are only counted in stats
  constexpr size_t kMaxNotes = 8;      // kept for warning(); the log has them all
  {
    std::lock_guard<std::mutex> l(mu);
    if (noted.size() >= kMaxTopics || !noted.insert(topic).second) return;
    if (notes.size() < kMaxNotes) notes.push_back(line);
  }
  Log(LogLevel::kWarn, line);
}

Stats CubinCache::stats() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->stats;
}
bool CubinCache::memory_only() const { return impl_->MemoryOnly(); }
const std::string& CubinCache::dir() const { return impl_->dir; }
bool CubinCache::read_only() const { return impl_->read_only; }
std::string CubinCache::warning() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  std::string out = impl_->warning;
  for (const std::string& n : impl_->notes) absl::StrAppend(&out, out.empty() ? "" : "; ", n);
  return out;
}

}  // namespace kjit::cache
