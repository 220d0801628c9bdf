#include "runtime/kernels/catalog.h"

namespace kjit::kernels {

const std::vector<Specialization>& Catalog() {
  static const std::vector<Specialization>* const all = [] {
    auto* v = new std::vector<Specialization>(MlaVerifySpecializations());
    std::vector<Specialization> naive = MlaVerifyNaiveSpecializations();
    v->insert(v->end(), naive.begin(), naive.end());
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
