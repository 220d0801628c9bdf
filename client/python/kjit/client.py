"""A kjit client: the launch mode (in-process, ring, remote or embedded) chosen when it is created,
the first of the configured order that works (KJIT_MODES, else in-process, ring, remote, embedded).
Needs no torch: torch_ops.py builds the calls from tensors."""
import ctypes
import os
import threading

from kjit import _native
from kjit.errors import UNIMPLEMENTED, Error, Unsupported


class Client:
    """A connection to kjitd (or the embedded compiler) and the launcher of the chosen mode.

    target: "unix:///path" or "host:port" (default $KJIT_TARGET, else the daemon's default socket);
    modes: "in-process,ring,remote,embedded" or a list; deadline_ms: of every RPC and ring call;
    events: order ring/remote launches with CUDA IPC events instead of synchronizing;
    session: open a session, so kjitd releases this process's registrations when it exits;
    token_file: the token kjitd's --token-file asks for over TCP (default $KJIT_TOKEN_FILE).
    A restarted kjitd is found again on the next call (ring and remote modes open a new session and
    register again); while it is away, calls raise kjit.Error UNAVAILABLE within the deadline."""

    def __init__(self, target=None, modes=None, deadline_ms=0, cache_dir=None, client_name=None, events=False,
                 session=True, token_file=None):
        lib = _native.lib()
        if isinstance(modes, (list, tuple)):
            modes = ",".join(modes)
        opts = _native.ClientOptions()
        opts.struct_size = ctypes.sizeof(opts)
        opts.target = target.encode() if target else None
        opts.modes = modes.encode() if modes else None
        opts.deadline_ms = int(deadline_ms or 0)
        opts.cache_dir = os.fsencode(cache_dir) if cache_dir else None
        opts.client_name = client_name.encode() if client_name else None
        opts.flags = (_native.FLAG_EVENTS if events else 0) | (0 if session else _native.FLAG_NO_SESSION)
        opts.token_file = os.fsencode(token_file) if token_file else None
        handle = ctypes.c_void_p()
        _native.check(lib.kjit_client_create(ctypes.byref(opts), ctypes.byref(handle)))
        self._lib = lib
        self._handle = handle.value
        self._verify = lib.kjit_mla_verify
        self._tls = threading.local()  # each thread's workspace_needed: calls of two threads may overlap
        self.mode = _native.MODES.get(lib.kjit_client_mode(self._handle), "?")
        self.description = lib.kjit_client_describe(self._handle).decode()

    def __repr__(self):
        return f"kjit.Client({self.description})"

    def close(self):
        if self._handle:
            self._lib.kjit_client_destroy(self._handle)
            self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def prepare(self, arch):
        """Fetches (in-process) or compiles (embedded) every kernel for arch ("sm_90"), no GPU needed."""
        _native.check(self._lib.kjit_client_prepare(self._handle, arch.encode()))

    def mla_verify(self, args, stream):
        """Launches from a filled kjit_mla_verify_args buffer (torch_ops.py fills it). Returns 0, or
        the workspace size the launch needs when the buffer's is smaller (nothing was queued)."""
        tls = self._tls
        try:
            needed, needed_ref = tls.needed
        except AttributeError:
            needed = ctypes.c_uint64(0)
            needed_ref = ctypes.byref(needed)
            tls.needed = needed, needed_ref
        code = self._verify(self._handle, args, stream, needed_ref)
        if code == _native.KJIT_OK:
            return 0
        if code == _native.KJIT_WORKSPACE_TOO_SMALL:
            return needed.value
        if code == UNIMPLEMENTED:  # refused before launching (e.g. a strided view through the daemon)
            raise Unsupported(_native.last_error())
        raise Error(code, _native.last_error())

    def check_errors(self, device, stream=0):
        """Synchronizes `stream` (0: the device) and raises kjit.Error for the kernels' errors since
        the last check on `device` (in-process and embedded; the other modes report them per call)."""
        _native.check(self._lib.kjit_check_errors(self._handle, int(device), int(stream)))


_default = None
_default_lock = threading.Lock()


def default_client():
    """The process's client, created on first use with the environment's settings."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Client(events=os.environ.get("KJIT_EVENTS", "0") == "1")
    return _default
