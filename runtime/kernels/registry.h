// The families built into this binary, and the catalog of everything they compile. Adding a family
// is a folder under runtime/kernels/ (its KernelFamily), one under kernel_sources/ (its device
// code) and one line in registry.cc.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/kernels/catalog.h"
#include "runtime/kernels/family.h"

namespace kjit::kernels {

// Every family, in a fixed order (the models kjitd serves, in ModelMetadata's and
// RepositoryIndex's order).
std::span<const KernelFamily* const> Families();

// INVALID_ARGUMENT naming the known families when `name` is none of them.
StatusOr<const KernelFamily*> FindFamily(std::string_view name);

// Every specialization of every family, in a fixed order; built once.
const std::vector<Specialization>& Catalog();

// Specializations of one family (empty when the family is unknown).
std::vector<Specialization> FamilySpecializations(std::string_view family);

// The families' descriptors (each defined in its folder's family.cc).
const KernelFamily& MlaVerifyFamily();
const KernelFamily& MlaVerifyNaiveFamily();

}  // namespace kjit::kernels
