// Who a request to the region registry is (runtime/ipc/region_registry.h says what each one sees).
#pragma once

#include <string>
#include <utility>

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

}  // namespace kjit::ipc
