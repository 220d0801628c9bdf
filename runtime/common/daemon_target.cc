#include "runtime/common/daemon_target.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
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

std::string TokenTextOf(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

bool IsTokenText(std::string_view token) {
  if (token.empty()) return false;
  for (const char c : token) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

StatusOr<std::string> ReadClientTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " (KJIT_TOKEN_FILE): cannot read it: ",
                                                   std::strerror(errno)));
  }
  const std::string token = TokenTextOf(text.str());
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " (KJIT_TOKEN_FILE) is empty: it must hold "
                                                   "the token of kjitd's --token-file"));
  }
  if (!IsTokenText(token)) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " (KJIT_TOKEN_FILE) holds a character "
                                                   "that is not printable ASCII: a token is one line of printable "
                                                   "ASCII without spaces"));
  }
  return token;
}

}  // namespace kjit
