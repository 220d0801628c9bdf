#include "runtime/common/daemon_target.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kjit {

std::string DefaultDaemonTarget() {
  std::vector<std::string> candidates;
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg != '\0') {
    candidates.push_back(absl::StrCat(xdg, "/kjit/kjitd.sock"));
  }
  candidates.push_back("/run/kjit/kjitd.sock");
  candidates.push_back(absl::StrCat("/tmp/kjit-", getuid(), "/kjitd.sock"));
  for (const std::string& c : candidates) {
    struct stat st;
    if (stat(c.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return "unix://" + c;
  }
  return "unix://" + candidates.front();
}

}  // namespace kjit
