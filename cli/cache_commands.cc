// `kjit cache ls | show KEY | verify | gc [--max-bytes N] | clear` (and `stats`: cache_stats_command.cc).
#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/json.h"
#include "cli/output.h"
#include "jit_cache/cubin_cache.h"
#include "runtime/common/kernel_resources.h"

namespace kjit::cli {
namespace {

const Flag kDirFlag{"cache-dir", "DIR", "cache directory (default $KJIT_CACHE_DIR, $XDG_CACHE_HOME/kjit, ~/.cache/kjit)"};
const Flag kJsonFlag{"json", "", "print JSON instead of text"};

const Command kLs{"kjit cache ls [flags]", "List the cache's entries: key, kernel family/specialization, arch, size, last use.",
                  {kDirFlag, kJsonFlag}};
const Command kShow{"kjit cache show KEY [flags]",
                    "Show one entry's metadata: options, NVRTC version, lowered kernel names and their\n"
                    "resource report. KEY may be any unique prefix of the key.",
                    {kDirFlag, kJsonFlag}, 1, 1};
const Command kVerify{"kjit cache verify [flags]",
                      "Check every entry file (a regular file no larger than any entry can be; header, lengths,\n"
                      "key, payload SHA-256, metadata) and remove the ones that fail (a non-empty directory\n"
                      "is reported, not emptied). Exit status 1 when any failed.",
                      {kDirFlag, kJsonFlag}};
const Command kGc{"kjit cache gc [flags]",
                  "Remove least recently used entries until the cache holds at most the byte cap.\n"
                  "Entries loaded by a running process are kept.",
                  {kDirFlag, {"max-bytes", "N", "byte cap (default $KJIT_CACHE_MAX_BYTES, else 1 GiB)"}, kJsonFlag}};
const Command kClear{"kjit cache clear [flags]", "Remove every entry not loaded by a running process.",
                     {kDirFlag, kJsonFlag}};
const Command kCache{"kjit cache COMMAND [flags]",
                     "Inspect and maintain the cubin cache.\n\ncommands:\n"
                     "  ls        list entries\n  show KEY  one entry's metadata\n"
                     "  verify    check every entry, remove broken ones\n"
                     "  gc        evict least recently used entries down to a byte cap\n"
                     "  clear     remove all entries not in use\n"
                     "  stats     a running daemon's hit, miss, eviction and corruption counts (or a\n"
                     "            directory's size with --cache-dir)",
                     {}};

// The cache named by --cache-dir (or the environment); null after printing why it is unusable.
std::unique_ptr<cache::CubinCache> OpenCache(const Parsed& p, uint64_t max_bytes = 0) {
  auto c = cache::CubinCache::Open(cache::Options{.dir = p.Get("cache-dir"), .max_bytes = max_bytes});
  if (!c->warning().empty()) std::fprintf(stderr, "kjit: %s\n", c->warning().c_str());
  return c->memory_only() ? nullptr : std::move(c);
}

Json MetaJson(const std::string& key, const cache::EntryMeta& m) {
  Json kernels = Json::array();
  for (const auto& k : m.kernels) {
    const KernelResources& r = k.resources;
    kernels.push_back({{"name_expression", k.name_expression},
                       {"lowered_name", r.lowered_name},
                       {"registers", r.registers},
                       {"spill_store_bytes", r.spill_store_bytes},
                       {"spill_load_bytes", r.spill_load_bytes},
                       {"shared_bytes", r.shared_bytes},
                       {"stack_bytes", r.stack_bytes}});
  }
  return {{"key", key},
          {"family", m.family},
          {"specialization", m.specialization},
          {"arch", m.arch},
          {"nvrtc_version", m.nvrtc_version},
          {"options", m.options},
          {"kernels", std::move(kernels)},
          {"compile_ms", m.compile_ms},
          {"created_unix", m.created_unix},
          {"last_used_unix", m.last_used_unix}};
}

int Ls(const Parsed& p) {
  auto c = OpenCache(p);
  if (!c) return kExitFailure;
  StatusOr<std::vector<cache::ListedEntry>> list = c->List();
  if (!list.ok()) return Fail(list.status());
  uint64_t total = 0;
  Json items = Json::array();
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : *list) {
    total += e.file_bytes;
    Json j = MetaJson(e.key, e.meta);
    j["file_bytes"] = e.file_bytes;
    j["in_use"] = e.in_use;
    items.push_back(std::move(j));
    rows.push_back({e.key.substr(0, 16), e.meta.family + "/" + e.meta.specialization, e.meta.arch,
                    std::to_string(e.meta.kernels.size()), HumanBytes(e.file_bytes),
                    UnixTime(e.meta.last_used_unix), e.in_use ? "yes" : ""});
  }
  if (p.Has("json")) {
    PrintJson({{"dir", c->dir()}, {"entries", std::move(items)}, {"total_bytes", total}});
    return kExitOk;
  }
  PrintTable({"key", "specialization", "arch", "kernels", "size", "last used", "in use"}, rows);
  std::printf("%zu entries, %s in %s\n", list->size(), HumanBytes(total).c_str(), c->dir().c_str());
  return kExitOk;
}

int Show(const Parsed& p) {
  auto c = OpenCache(p);
  if (!c) return kExitFailure;
  StatusOr<cache::Entry> e = c->Show(p.args[0]);
  if (!e.ok()) return Fail(e.status());
  if (p.Has("json")) {
    Json j = MetaJson(e->key, e->meta);
    j["cubin_bytes"] = e->cubin.size();
    PrintJson(j);
    return kExitOk;
  }
  const cache::EntryMeta& m = e->meta;
  std::printf("key             %s\nspecialization  %s/%s\narch            %s\nnvrtc           %s\n",
              e->key.c_str(), m.family.c_str(), m.specialization.c_str(), m.arch.c_str(),
              m.nvrtc_version.c_str());
  std::printf("cubin           %s\ncompile         %.1f ms\ncreated         %s\nlast used       %s\noptions        ",
              HumanBytes(e->cubin.size()).c_str(), m.compile_ms, UnixTime(m.created_unix).c_str(),
              UnixTime(m.last_used_unix).c_str());
  for (const auto& o : m.options) std::printf(" %s", o.c_str());
  std::printf("\n\n");
  std::vector<std::vector<std::string>> rows;
  for (const auto& k : m.kernels) {
    const KernelResources& r = k.resources;
    rows.push_back({k.name_expression, r.lowered_name, std::to_string(r.registers),
                    absl::StrCat(r.spill_store_bytes, "/", r.spill_load_bytes), std::to_string(r.shared_bytes),
                    std::to_string(r.stack_bytes)});
  }
  PrintTable({"kernel", "lowered name", "registers", "spills st/ld", "smem", "stack"}, rows);
  return kExitOk;
}

int Verify(const Parsed& p) {
  auto c = OpenCache(p);
  if (!c) return kExitFailure;
  StatusOr<cache::VerifyReport> r = c->Verify();
  if (!r.ok()) return Fail(r.status());
  if (p.Has("json")) {
    Json bad = Json::array();
    for (const auto& [file, why] : r->bad) bad.push_back({{"file", file}, {"reason", why}});
    PrintJson({{"checked", r->checked}, {"ok", r->ok}, {"broken", std::move(bad)}});
  } else {
    for (const auto& [file, why] : r->bad) std::printf("broken %s: %s\n", file.c_str(), why.c_str());
    std::printf("%lu entries checked, %lu ok, %zu broken (removed unless the line says left in place)\n",
                static_cast<unsigned long>(r->checked), static_cast<unsigned long>(r->ok), r->bad.size());
  }
  return r->bad.empty() ? kExitOk : kExitFailure;
}

int Collect(const Parsed& p, bool clear) {
  uint64_t max_bytes = 0;
  if (p.Has("max-bytes") && (!absl::SimpleAtoi(p.Get("max-bytes"), &max_bytes) || max_bytes == 0)) {
    return UsageError(kGc, absl::InvalidArgumentError("--max-bytes must be a positive integer"));
  }
  auto c = OpenCache(p, max_bytes);
  if (!c) return kExitFailure;
  StatusOr<cache::GcReport> r = clear ? c->Clear() : c->Gc(c->max_bytes());
  if (!r.ok()) return Fail(r.status());
  if (p.Has("json")) {
    PrintJson({{"bytes_before", r->bytes_before},
               {"bytes_after", r->bytes_after},
               {"removed", r->removed},
               {"skipped_in_use", r->skipped_in_use}});
  } else {
    std::printf("removed %lu entries: %s -> %s; %lu kept because in use\n", static_cast<unsigned long>(r->removed),
                HumanBytes(r->bytes_before).c_str(), HumanBytes(r->bytes_after).c_str(),
                static_cast<unsigned long>(r->skipped_in_use));
  }
  return kExitOk;
}

}  // namespace

int RunCache(int argc, char** argv, int first) {
  const std::string sub = first < argc ? argv[first] : "";
  struct Sub {
    const char* name;
    const Command* cmd;
    int (*run)(const Parsed&);
  };
  static const Sub kSubs[] = {{"ls", &kLs, Ls},
                              {"show", &kShow, Show},
                              {"verify", &kVerify, Verify},
                              {"gc", &kGc, [](const Parsed& p) { return Collect(p, false); }},
                              {"clear", &kClear, [](const Parsed& p) { return Collect(p, true); }},
                              {"stats", &CacheStatsCommand(), CacheStats}};
  if (sub == "--help" || sub == "-h") {
    std::fputs(HelpText(kCache).c_str(), stdout);
    return kExitOk;
  }
  for (const Sub& s : kSubs) {
    if (sub != s.name) continue;
    StatusOr<Parsed> p = Parse(*s.cmd, argc, argv, first + 1);
    if (!p.ok()) return UsageError(*s.cmd, p.status());
    if (p->help) {
      std::fputs(HelpText(*s.cmd).c_str(), stdout);
      return kExitOk;
    }
    return s.run(*p);
  }
  return UsageError(kCache, absl::InvalidArgumentError(
                                sub.empty() ? "missing cache command" : absl::StrCat("unknown cache command '", sub, "'")));
}

}  // namespace kjit::cli
