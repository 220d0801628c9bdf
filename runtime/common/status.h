// One error type for the whole runtime: absl::Status (code + message). Context (file:line, the CUDA
// error name, a compile log) goes into the message; server/ maps codes to gRPC codes in one place.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace kjit {

using Status = absl::Status;
template <typename T>
using StatusOr = absl::StatusOr<T>;

// Prefixes a status message with where it was seen, keeping its code.
inline Status WithContext(const Status& s, std::string_view context) {
  if (s.ok()) return s;
  // absl::string_view is its own type in this abseil build, not std::string_view.
  return Status(s.code(), absl::StrCat(absl::string_view(context.data(), context.size()), ": ",
                                       s.message()));
}

}  // namespace kjit

#define KJIT_STATUS_CONCAT_INNER(a, b) a##b
#define KJIT_STATUS_CONCAT(a, b) KJIT_STATUS_CONCAT_INNER(a, b)

#define KJIT_RETURN_IF_ERROR(expr)              \
  do {                                          \
    ::kjit::Status kjit_status_ = (expr);       \
    if (!kjit_status_.ok()) return kjit_status_; \
  } while (0)

#define KJIT_ASSIGN_OR_RETURN(lhs, expr) \
  KJIT_ASSIGN_OR_RETURN_IMPL(KJIT_STATUS_CONCAT(kjit_statusor_, __LINE__), lhs, expr)
#define KJIT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return std::move(tmp).status();   \
  lhs = std::move(tmp).value()
