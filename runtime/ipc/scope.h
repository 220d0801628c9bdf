// Who a request to the region registry is (runtime/ipc/region_registry.h says what each one sees).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kjit::ipc {

// Who asks: the request's session ("" outside one) and the client's identity ("" when there is
// none to tell: in-process callers and tests). Implicit from a session id alone.
struct Scope {
  std::string session;
  std::string owner;
  Scope() = default;
  Scope(std::string s) : session(std::move(s)) {}  // NOLINT(google-explicit-constructor)
  Scope(const char* s) : session(s) {}             // NOLINT(google-explicit-constructor)
  Scope(std::string s, std::string o) : session(std::move(s)), owner(std::move(o)) {}
};

// What one client identity (a Scope's owner) may hold of a limit that all clients share: three
// quarters of it (all of a limit under 4), so that one user cannot take every slot from another.
// Callers without an identity ("") are held to the limit alone.
constexpr uint64_t IdentityShare(uint64_t limit) { return limit - limit / 4; }
// How a refusal at that share names it: "three quarters of kjitd's limit of `limit` (`flag`; the
// rest is kept for other users)".
inline std::string IdentityShareText(uint64_t limit, const char* flag) {
  return absl::StrCat("three quarters of kjitd's limit of ", limit, " (", flag, "; the rest is kept for other users)");
}

}  // namespace kjit::ipc
