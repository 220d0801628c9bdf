// Parses ptxas --verbose output, e.g.
//   ptxas info    : Compiling entry function '_Z1kv' for 'sm_90'
//   ptxas info    : Function properties for _Z1kv
//   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 12 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]
// "Function properties" also appear for non-inlined device functions; only entries are reported.
#include <map>
#include <regex>
#include <string>

#include "runtime/nvrtc/compiler.h"

namespace kjit::nvrtc {
namespace {

int IntBefore(const std::string& line, const std::regex& re) {
  std::smatch m;
  if (!std::regex_search(line, m, re)) return 0;
  return std::stoi(m[1].str());
}

}  // namespace

std::vector<KernelResources> ParseResourceReport(std::string_view log) {
  static const std::regex kEntry(R"(Compiling entry function '([^']+)')");
  static const std::regex kProps(R"(Function properties for (\S+))");
  static const std::regex kStack(R"((\d+) bytes stack frame)");
  static const std::regex kSpillStores(R"((\d+) bytes spill stores)");
  static const std::regex kSpillLoads(R"((\d+) bytes spill loads)");
  static const std::regex kRegisters(R"(Used (\d+) registers)");
  static const std::regex kSmem(R"((\d+) bytes smem)");
  static const std::regex kCmem(R"((\d+) bytes cmem\[0\])");

  std::vector<KernelResources> entries;
  std::map<std::string, size_t> index;  // lowered name -> entries position
  std::string entry, props;             // the entry being compiled; the function being described
  auto slot = [&](const std::string& name) -> KernelResources* {
    auto it = index.find(name);
    return it == index.end() ? nullptr : &entries[it->second];
  };

  size_t pos = 0;
  while (pos < log.size()) {
    size_t end = log.find('\n', pos);
    if (end == std::string_view::npos) end = log.size();
    std::string line(log.substr(pos, end - pos));
    pos = end + 1;
    std::smatch m;
    if (std::regex_search(line, m, kEntry)) {
      entry = m[1].str();
      if (!index.count(entry)) {
        index[entry] = entries.size();
        entries.push_back(KernelResources{.lowered_name = entry});
      }
    } else if (std::regex_search(line, m, kProps)) {
      props = m[1].str();
    } else if (line.find("stack frame") != std::string::npos) {
      if (KernelResources* k = slot(props)) {
        k->stack_bytes = IntBefore(line, kStack);
        k->spill_store_bytes = IntBefore(line, kSpillStores);
        k->spill_load_bytes = IntBefore(line, kSpillLoads);
      }
    } else if (std::regex_search(line, m, kRegisters)) {
      if (KernelResources* k = slot(entry)) {
        k->registers = std::stoi(m[1].str());
        k->shared_bytes = IntBefore(line, kSmem);
        k->const_bytes = IntBefore(line, kCmem);
      }
    }
  }
  return entries;
}

}  // namespace kjit::nvrtc
