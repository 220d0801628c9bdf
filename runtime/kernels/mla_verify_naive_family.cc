#include "runtime/kernels/catalog.h"

namespace kjit::kernels {

std::vector<Specialization> MlaVerifyNaiveSpecializations() { return {}; }

}  // namespace kjit::kernels
