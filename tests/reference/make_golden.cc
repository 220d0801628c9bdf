// make_golden OUTDIR: writes every bundle of GoldenCatalog() (deterministic: same bytes every run).
#include <cstdio>
#include <string>

#include "tests/reference/golden.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  size_t total = 0;
  for (const auto& entry : kjit::reference::GoldenCatalog()) {
    const kjit::reference::MlaCase c = kjit::reference::MakeCase(entry.spec);
    const std::string bytes = kjit::reference::SerializeGolden(entry.name, c, kjit::reference::Reference(c));
    const std::string path = kjit::reference::GoldenPath(dir, entry.name);
    const kjit::Status s = kjit::reference::WriteFileAtomically(path, bytes);
    if (!s.ok()) {
      std::fprintf(stderr, "make_golden: %s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("%-40s %9zu bytes\n", path.c_str(), bytes.size());
    total += bytes.size();
  }
  std::printf("total %zu bytes\n", total);
  return 0;
}
