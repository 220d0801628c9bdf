#include "runtime/kernels/registry.h"

#include "absl/strings/str_cat.h"
#include "runtime/common/client_text.h"

namespace kjit::kernels {

std::span<const KernelFamily* const> Families() {
  static const KernelFamily* const families[] = {&MlaVerifyFamily(), &MlaVerifyNaiveFamily()};
  return families;
}

StatusOr<const KernelFamily*> FindFamily(std::string_view name) {
  std::string known;
  for (const KernelFamily* f : Families()) {
    if (f->name() == name) return f;
    absl::StrAppend(&known, known.empty() ? "" : ", ", std::string(f->name()));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model '", ClientText(name), "' (models: ", known, ")"));
}

const std::vector<Specialization>& Catalog() {
  static const std::vector<Specialization>* const all = [] {
    auto* v = new std::vector<Specialization>();
    for (const KernelFamily* f : Families()) {
      std::vector<Specialization> specs = f->Specializations();
      v->insert(v->end(), specs.begin(), specs.end());
    }
    return v;
  }();
  return *all;
}

std::vector<Specialization> FamilySpecializations(std::string_view family) {
  std::vector<Specialization> out;
  for (const Specialization& s : Catalog()) {
    if (s.family == family) out.push_back(s);
  }
  return out;
}

}  // namespace kjit::kernels
