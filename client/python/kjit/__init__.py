"""kjit's Python client pieces that need no compiled code: the shared-memory launch ring
(kjit.ring) and kjitd's messages built from the build's descriptor set (kjit.descriptors, which
needs google.protobuf and is imported on its own). The generated gRPC stubs live in the same package
name (kjit.v1, from proto/kjit/v1/kernel_service.proto): wherever they are on sys.path, they stay
importable."""
import pkgutil

__path__ = pkgutil.extend_path(__path__, __name__)

from kjit.ring import LaunchRing, RingError  # noqa: E402

__all__ = ["LaunchRing", "RingError"]
