// Where a client finds kjitd by default: PROTOCOL.md's socket paths.
#pragma once

#include <string>

namespace kjit {

// "unix://" + the first of $XDG_RUNTIME_DIR/kjit/kjitd.sock, /run/kjit/kjitd.sock and
// /tmp/kjit-$UID/kjitd.sock that is a socket, else of the first candidate. ($KJIT_TARGET is the
// caller's to read first.)
std::string DefaultDaemonTarget();

}  // namespace kjit
