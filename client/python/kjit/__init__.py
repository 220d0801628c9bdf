"""kjit from Python: SGLang's MLA tree-verify attention on kjit's kernels.

    import kjit
    kjit.verify_attention(q, k, v, o, k_buffer, v_buffer, qo_indptr, kv_indptr, kv_indices,
                          custom_mask, True, mask_indptr, max_len_extend, 1.0, 1.0, sm_scale)
    kjit.check_errors()          # at a sync point of yours: what the kernels found

Pure Python over libkjit_client's C ABI (ctypes; $KJIT_CLIENT_LIB names the library when it is not
found next to the package or in a build tree). Importable without torch: kjit.verify_attention
imports it on its first call. kjit.sglang installs it into SGLang's Triton backend. kjit.ring and
kjit.descriptors are the launch ring and kjitd's messages for clients that speak to the daemon
themselves. The generated gRPC stubs (kjit.v1, from proto/) share the package name: wherever they are
on sys.path, they stay importable."""
import pkgutil

__path__ = pkgutil.extend_path(__path__, __name__)

from kjit.errors import Error, Unsupported  # noqa: E402
from kjit.client import Client, default_client  # noqa: E402
from kjit.torch_ops import check_errors, verify_attention  # noqa: E402
from kjit.ring import LaunchRing, RingError  # noqa: E402

__all__ = ["Client", "Error", "LaunchRing", "RingError", "Unsupported", "check_errors", "default_client",
           "verify_attention"]
