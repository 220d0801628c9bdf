// Parses ptxas --verbose output, e.g.
//   ptxas info    : Compiling entry function '_Z1kv' for 'sm_90'
//   ptxas info    : Function properties for _Z1kv
//   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 12 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]
// "Function properties" also appear for non-inlined device functions; only entries are reported.
#include <map>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "runtime/nvrtc/compiler.h"

namespace kjit::nvrtc {
namespace {

// The integer written just before `suffix` ("1024 bytes smem" -> 1024); 0 when absent.
int NumberBefore(std::string_view line, std::string_view suffix) {
  size_t at = line.find(suffix);
  if (at == std::string_view::npos) return 0;
  size_t end = at;
  while (end > 0 && line[end - 1] == ' ') --end;
  size_t begin = end;
  while (begin > 0 && absl::ascii_isdigit(static_cast<unsigned char>(line[begin - 1]))) --begin;
  int value = 0;
  if (begin == end || !absl::SimpleAtoi(absl::string_view(line.data() + begin, end - begin), &value)) return 0;
  return value;
}

// The integer written just after `prefix` ("Used 12 registers" with "Used " -> 12); -1 when absent.
int NumberAfter(std::string_view line, std::string_view prefix) {
  size_t at = line.find(prefix);
  if (at == std::string_view::npos) return -1;
  size_t begin = at + prefix.size(), end = begin;
  while (end < line.size() && absl::ascii_isdigit(static_cast<unsigned char>(line[end]))) ++end;
  int value = 0;
  if (begin == end || !absl::SimpleAtoi(absl::string_view(line.data() + begin, end - begin), &value)) return -1;
  return value;
}

// The text after `prefix` up to `stop` (or the end of the line); empty when absent.
std::string TextAfter(std::string_view line, std::string_view prefix, char stop) {
  size_t at = line.find(prefix);
  if (at == std::string_view::npos) return {};
  std::string_view rest = line.substr(at + prefix.size());
  rest = rest.substr(0, rest.find(stop));
  while (!rest.empty() && (rest.back() == ' ' || rest.back() == '\r')) rest.remove_suffix(1);
  return std::string(rest);
}

}  // namespace

std::vector<KernelResources> ParseResourceReport(std::string_view log) {
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
    std::string_view line = log.substr(pos, end - pos);
    pos = end + 1;
    if (std::string name = TextAfter(line, "Compiling entry function '", '\''); !name.empty()) {
      entry = name;
      if (!index.count(entry)) {
        index[entry] = entries.size();
        entries.push_back(KernelResources{.lowered_name = entry});
      }
    } else if (std::string fn = TextAfter(line, "Function properties for ", ' '); !fn.empty()) {
      props = fn;
    } else if (line.find("bytes stack frame") != std::string_view::npos) {
      if (KernelResources* k = slot(props)) {
        k->stack_bytes = NumberBefore(line, "bytes stack frame");
        k->spill_store_bytes = NumberBefore(line, "bytes spill stores");
        k->spill_load_bytes = NumberBefore(line, "bytes spill loads");
      }
    } else if (int regs = NumberAfter(line, "Used "); regs >= 0 && line.find(" registers") != std::string_view::npos) {
      if (KernelResources* k = slot(entry)) {
        k->registers = regs;
        k->shared_bytes = NumberBefore(line, "bytes smem");
        k->const_bytes = NumberBefore(line, "bytes cmem[0]");
      }
    }
  }
  return entries;
}

}  // namespace kjit::nvrtc
