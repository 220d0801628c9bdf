"""ctypes over libkjit_client.so.1 (client/cpp/include/kjit_client.h). No compiled extension: the
library is found at run time, and its structs are filled with struct.pack_into."""
import ctypes
import os
import struct

from kjit.errors import Error

KJIT_OK = 0
KJIT_WORKSPACE_TOO_SMALL = 100
MODES = {1: "in-process", 2: "ring", 3: "remote", 4: "embedded"}
FLAG_EVENTS = 1
FLAG_NO_SESSION = 2

DTYPE_BOOL, DTYPE_UINT8, DTYPE_INT32, DTYPE_INT64, DTYPE_UINT32 = 1, 2, 3, 4, 5
DTYPE_BF16, DTYPE_FP32, DTYPE_FP16, DTYPE_FP8_E4M3 = 6, 7, 8, 9

# kjit_tensor: data, dtype, ndim, shape[4], strides[4] (11 eight-byte words).
TENSOR = "Qqq4q4q"
TENSOR_BYTES = struct.calcsize("<" + TENSOR)
# kjit_mla_verify_args: struct_size, 12 tensors, sm/k/v scales, is_causal, max_draft, max_prefix,
# device, workspace, workspace_bytes, fp8_numerics. The order of the tensors:
VERIFY_TENSORS = ("q", "k_extend", "v_extend", "kv_cache", "qo_indptr", "kv_indptr", "kv_indices",
                  "custom_mask", "packed_mask", "mask_indptr", "o", "lse")
VERIFY_TAIL = struct.Struct("<dddqqqqQQq")
VERIFY_BYTES = 8 + len(VERIFY_TENSORS) * TENSOR_BYTES + VERIFY_TAIL.size
TENSOR_OFFSET = {name: 8 + i * TENSOR_BYTES for i, name in enumerate(VERIFY_TENSORS)}
TAIL_OFFSET = 8 + len(VERIFY_TENSORS) * TENSOR_BYTES
WORKSPACE_OFFSET = TAIL_OFFSET + 7 * 8
FP8_NUMERICS_OFFSET = TAIL_OFFSET + 9 * 8
# kjit_mla_verify_args.fp8_numerics (KJIT_FP8_NUMERICS_*), by verify_attention's names.
FP8_NUMERICS = {"dequant": 0, "fp8": 1}
PACK_TENSOR = struct.Struct("<" + TENSOR)


class ClientOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint64), ("target", ctypes.c_char_p), ("modes", ctypes.c_char_p),
                ("deadline_ms", ctypes.c_int64), ("cache_dir", ctypes.c_char_p), ("client_name", ctypes.c_char_p),
                ("flags", ctypes.c_int64), ("token_file", ctypes.c_char_p)]


def _candidates():
    env = os.environ.get("KJIT_CLIENT_LIB")
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libkjit_client.so.1")  # installed next to the package
    # A source checkout: client/python/kjit -> build*/client/cpp
    root = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    for build in ("build", "build-release"):
        yield os.path.join(root, build, "client", "cpp", "libkjit_client.so.1")
    yield "libkjit_client.so.1"  # the loader's path (an installed package)


_lib = None


def lib():
    """The loaded library (found once); Error(UNAVAILABLE) naming where it looked otherwise."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        try:
            handle = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        _declare(handle)
        if handle.kjit_abi_version() != 1:
            raise Error(9, f"{path} has C ABI {handle.kjit_abi_version()}; this package speaks 1")
        _lib = handle
        return _lib
    raise Error(14, "libkjit_client.so.1 not found (set KJIT_CLIENT_LIB); tried: " + "; ".join(tried))


def _declare(h):
    h.kjit_last_error.restype = ctypes.c_char_p
    h.kjit_version.restype = ctypes.c_char_p
    h.kjit_abi_version.restype = ctypes.c_int
    h.kjit_client_create.argtypes = [ctypes.POINTER(ClientOptions), ctypes.POINTER(ctypes.c_void_p)]
    h.kjit_client_create.restype = ctypes.c_int
    h.kjit_client_destroy.argtypes = [ctypes.c_void_p]
    h.kjit_client_destroy.restype = None
    h.kjit_client_mode.argtypes = [ctypes.c_void_p]
    h.kjit_client_mode.restype = ctypes.c_int
    h.kjit_client_describe.argtypes = [ctypes.c_void_p]
    h.kjit_client_describe.restype = ctypes.c_char_p
    h.kjit_client_prepare.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    h.kjit_client_prepare.restype = ctypes.c_int
    h.kjit_mla_verify.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)]
    h.kjit_mla_verify.restype = ctypes.c_int
    h.kjit_check_errors.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64]
    h.kjit_check_errors.restype = ctypes.c_int


def last_error():
    return lib().kjit_last_error().decode("utf-8", "replace")


def check(code):
    if code != KJIT_OK:
        raise Error(code, last_error())
