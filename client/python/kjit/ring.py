"""A launch ring client in plain Python (runtime/ipc/launch_ring.h is the contract; the layout
below must match its static_asserts).

The ring is a POSIX shared memory object: a 256-byte header, then one request area and one
response area of `capacity` bytes each. Create it, register it with kjitd
(SystemSharedMemoryRegister, key = LaunchRing.key), open it (kjit.v1.KernelService/OpenRing with
the region's name), then call(): the serialized inference.ModelInferRequest goes in, and the
call's gRPC status code, message and serialized ModelInferResponse come back. One call at a time.
kjitd parses a request only when its bytes differ from the previous call's on the ring: a caller
with fixed buffers can serialize its request once and send the same bytes on every call.

Stores are plain aligned 4-byte writes in program order (x86-64 keeps their order); the daemon's
poller is woken with FUTEX_WAKE when it says it sleeps, and waiting for the answer spins with
short sleeps (the daemon wakes a sleeping client only when the client says it sleeps, which this
client never does).
"""
import ctypes
import os
import struct
import time
from multiprocessing import shared_memory

HEADER_BYTES = 256
MAGIC = 0x474E524B  # "KRNG"
VERSION = 1
_CAPACITY, _REQUEST_SEQ, _REQUEST_BYTES = 8, 64, 68
_RESPONSE_SEQ, _RESPONSE_BYTES, _STATUS_CODE, _MESSAGE_BYTES, _DAEMON_SLEEPING = 128, 132, 136, 140, 144
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(os.uname().machine)
_FUTEX_WAKE = 1


class RingError(RuntimeError):
    """The ring itself failed (no answer in time, a request that does not fit)."""


class LaunchRing:
    def __init__(self, nbytes=1 << 20):
        if nbytes < HEADER_BYTES + 2:
            raise ValueError(f"a launch ring needs more than {HEADER_BYTES + 1} bytes, got {nbytes}")
        self._shm = shared_memory.SharedMemory(create=True, size=nbytes)
        self.key = "/" + self._shm.name  # what SystemSharedMemoryRegister wants
        self.nbytes = nbytes
        self.capacity = min((nbytes - HEADER_BYTES) // 2, 1 << 31)
        buf = self._shm.buf
        buf[:HEADER_BYTES] = bytes(HEADER_BYTES)
        struct.pack_into("<III", buf, 0, MAGIC, VERSION, self.capacity)
        self._seq = 0
        self._wake = None
        if _SYS_FUTEX is not None:
            libc = ctypes.CDLL(None, use_errno=True)
            address = ctypes.addressof(ctypes.c_char.from_buffer(buf, _REQUEST_SEQ))
            self._wake = lambda: libc.syscall(_SYS_FUTEX, ctypes.c_void_p(address), _FUTEX_WAKE, 2**31 - 1, 0, 0, 0)

    def _u32(self, offset):
        return struct.unpack_from("<I", self._shm.buf, offset)[0]

    def call(self, request, timeout=10.0):
        """Sends serialized request bytes; returns (status_code, message, response_bytes)."""
        if len(request) > self.capacity:
            raise RingError(f"request of {len(request)} bytes exceeds the ring's capacity of {self.capacity}")
        buf = self._shm.buf
        buf[HEADER_BYTES:HEADER_BYTES + len(request)] = request
        struct.pack_into("<I", buf, _REQUEST_BYTES, len(request))
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        struct.pack_into("<I", buf, _REQUEST_SEQ, self._seq)
        if self._wake is not None and self._u32(_DAEMON_SLEEPING):
            self._wake()
        deadline = time.monotonic() + timeout
        spins = 0
        while self._u32(_RESPONSE_SEQ) != self._seq:
            if time.monotonic() > deadline:
                raise RingError(f"kjitd did not answer on the launch ring within {timeout} s")
            spins += 1
            if spins > 1000:
                time.sleep(0.0001)
        out = HEADER_BYTES + self.capacity
        rb = min(self._u32(_RESPONSE_BYTES), self.capacity)
        mb = min(self._u32(_MESSAGE_BYTES), self.capacity - rb)
        code = struct.unpack_from("<i", buf, _STATUS_CODE)[0]
        return code, bytes(buf[out + rb:out + rb + mb]).decode("utf-8", "replace"), bytes(buf[out:out + rb])

    def close(self):
        """Unmaps and unlinks the object (unregister the region first)."""
        self._wake = None
        self._shm.close()
        self._shm.unlink()
