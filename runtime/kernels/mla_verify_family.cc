#include "runtime/kernels/catalog.h"

namespace kjit::kernels {

std::vector<Specialization> MlaVerifySpecializations() { return {}; }

}  // namespace kjit::kernels
