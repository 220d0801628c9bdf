// Where a client finds kjitd by default: PROTOCOL.md's socket paths.
#pragma once

#include <string>
#include <string_view>

#include "runtime/common/status.h"

namespace kjit {

// "unix://" + the first of $XDG_RUNTIME_DIR/kjit/kjitd.sock, /run/kjit/kjitd.sock and
// /tmp/kjit-$UID/kjitd.sock that is a socket, else of the first candidate. ($KJIT_TARGET is the
// caller's to read first.)
std::string DefaultDaemonTarget();

// The metadata key and the client's side of kjitd --token-file: the token in `path` (a trailing
// newline dropped), or INVALID_ARGUMENT naming the file and $KJIT_TOKEN_FILE when it cannot be read,
// is empty or holds anything but printable ASCII without spaces (invalid gRPC metadata). (kjitd
// checks the file's owner and mode; a client only reads it.)
inline constexpr char kTokenMetadataKey[] = "kjit-token";
// The token text rule both kjitd and its clients apply: `text` with its trailing newlines dropped;
// a token is printable ASCII without spaces (it travels as gRPC metadata).
std::string TokenTextOf(std::string text);
bool IsTokenText(std::string_view token);
StatusOr<std::string> ReadClientTokenFile(const std::string& path);

}  // namespace kjit
