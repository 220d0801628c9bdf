#include "runtime/kernels/family.h"

#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/common/client_text.h"

namespace kjit::kernels {
namespace {

Status Bad(const ParamSchema& s, const char* want) {
  return absl::InvalidArgumentError(absl::StrCat("parameter '", s.name, "' must be ", want));
}

StatusOr<TypedParam> Convert(const ParamSchema& s, const ParamValue& v) {
  using Kind = ParamSchema::Kind;
  switch (s.kind) {
    case Kind::kNumber:
      if (const double* d = std::get_if<double>(&v)) return *d;
      if (const int64_t* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
      if (const uint64_t* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
      if (const std::string* t = std::get_if<std::string>(&v)) {
        double d = 0;
        if (absl::SimpleAtod(*t, &d)) return d;
      }
      return Bad(s, "a number");
    case Kind::kBool:
      if (const bool* b = std::get_if<bool>(&v)) return *b;
      if (const int64_t* i = std::get_if<int64_t>(&v)) return *i != 0;
      if (const std::string* t = std::get_if<std::string>(&v)) {
        bool b = false;
        if (absl::SimpleAtob(*t, &b)) return b;
      }
      return Bad(s, "a bool");
    case Kind::kInt: {
      int64_t i = 0;
      if (const int64_t* p = std::get_if<int64_t>(&v)) {
        i = *p;
      } else if (const uint64_t* u = std::get_if<uint64_t>(&v);
                 u != nullptr && *u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        i = static_cast<int64_t>(*u);
      } else {
        return Bad(s, "an int64");
      }
      if (i < s.min || i > s.max) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter '", s.name, "' is ", i, "; must be ", s.min,
            s.max == std::numeric_limits<int64_t>::max() ? std::string(" or more") : absl::StrCat("..", s.max)));
      }
      return i;
    }
    case Kind::kString:
      if (const std::string* t = std::get_if<std::string>(&v); t != nullptr && !t->empty()) return *t;
      return Bad(s, "a non-empty string");
  }
  return absl::InternalError("unknown parameter kind");
}

}  // namespace

size_t DatatypeSize(std::string_view dt) {
  if (dt == "BOOL" || dt == "UINT8" || dt == "INT8") return 1;
  if (dt == "UINT16" || dt == "INT16" || dt == "FP16" || dt == "BF16") return 2;
  if (dt == "UINT32" || dt == "INT32" || dt == "FP32") return 4;
  if (dt == "UINT64" || dt == "INT64" || dt == "FP64") return 8;
  return 0;
}

std::optional<uint64_t> ShapeElements(std::span<const int64_t> shape) {
  uint64_t elems = 1;
  for (const int64_t d : shape) {
    if (d < 0 || (d != 0 && elems > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d))) {
      return std::nullopt;
    }
    elems *= static_cast<uint64_t>(d);
  }
  return elems;
}

std::string ShapeText(std::span<const int64_t> shape) {
  constexpr size_t kShown = 8;
  if (shape.size() <= kShown) return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
  return absl::StrCat("[", absl::StrJoin(shape.first(kShown), ","), ",...] (rank ", shape.size(), ")");
}

bool IsReservedParameter(std::string_view name) {
  return name.rfind("sequence_", 0) == 0 || name.rfind("triton_", 0) == 0 || name == "priority" ||
         name == "timeout" || name == "headers" || name == "binary_data_output";
}

StatusOr<TypedParams> ConvertParams(std::span<const ParamSchema> schemas, std::span<const Param> params) {
  TypedParams out(schemas.size());
  for (const Param& p : params) {
    if (IsReservedParameter(p.name)) continue;
    size_t i = 0;
    while (i < schemas.size() && schemas[i].name != p.name) ++i;
    if (i == schemas.size()) {
      std::string known;
      for (const ParamSchema& s : schemas) absl::StrAppend(&known, known.empty() ? "" : ", ", s.name);
      return absl::InvalidArgumentError(
          absl::StrCat("unknown request parameter '", ClientText(p.name), "' (known: ", known, ")"));
    }
    KJIT_ASSIGN_OR_RETURN(out[i], Convert(schemas[i], p.value));
  }
  for (size_t i = 0; i < schemas.size(); ++i) {
    if (schemas[i].required && std::holds_alternative<std::monostate>(out[i])) {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", schemas[i].name, "' is required"));
    }
  }
  return out;
}

int SchemaIndex(std::span<const TensorSchema> schema, std::string_view name) {
  for (size_t i = 0; i < schema.size(); ++i) {
    if (schema[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace kjit::kernels
