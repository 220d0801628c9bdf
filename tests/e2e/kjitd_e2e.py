"""What the kjitd end-to-end tests share (test_kjitd.py, test_kjitd_perimeter.py): the generated
stubs, a kjitd on a temporary socket, a small mla_verify request, a client run as another user, and
the command line every one of them takes.

usage of a test file: test_X.py --kjitd PATH --stubs DIR --descriptors FILE [unittest args]
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

ARGS = None  # set by main()
MAX = 2**31 - 1
OPTIONS = [("grpc.max_send_message_length", MAX), ("grpc.max_receive_message_length", MAX)]


def stubs():
    import grpc
    from health.v1 import health_pb2, health_pb2_grpc
    from inference import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pbg
    from kjit.v1 import kernel_service_pb2 as kpb, kernel_service_pb2_grpc as kpbg
    return grpc, health_pb2, health_pb2_grpc, pb, pbg, kpb, kpbg


def make_infer_request(pb, qo=(0, 2), fp8=False):
    """B = 1, D = 2, P = 3, H = 8. fp8: the cache as PROTOCOL.md has an fp8 e4m3 one travel, its bytes
    (UINT8, 0x38 = 1.0) with parameter kjit_kv_dtype "fp8_e4m3"."""
    import numpy as np
    req = pb.ModelInferRequest(model_name="mla_verify")
    req.parameters["sm_scale"].double_param = 0.14467963
    if fp8:
        req.parameters["kjit_kv_dtype"].string_param = "fp8_e4m3"
        kv_cache = ("kv_cache", "UINT8", [4, 1, 576], np.full((4, 1, 576), 0x38, np.uint8))
    else:
        kv_cache = ("kv_cache", "BF16", [4, 1, 576], np.zeros((4, 1, 576), np.uint16))
    tensors = [
        ("q", "BF16", [2, 8, 576], np.zeros((2, 8, 576), np.uint16)),
        ("k_extend", "BF16", [2, 1, 576], np.zeros((2, 1, 576), np.uint16)),
        kv_cache,
        ("qo_indptr", "INT32", [2], np.array(qo, np.int32)),
        ("kv_indptr", "INT32", [2], np.array([0, 3], np.int32)),
        ("kv_indices", "INT64", [3], np.array([1, 2, 3], np.int64)),
        ("custom_mask", "BOOL", [10], np.ones(10, np.bool_)),
        ("mask_indptr", "INT64", [2], np.array([0, 10], np.int64)),
    ]
    for name, dt, shape, arr in tensors:
        t = req.inputs.add(name=name, datatype=dt)
        t.shape.extend(shape)
        req.raw_input_contents.append(arr.tobytes())
    req.outputs.add(name="o")
    return req


class Daemon:
    def __init__(self, extra=(), socket_dir=None, stderr=None, preexec_fn=None):
        """socket_dir: a function that makes the socket's directory under the daemon's temporary one
        and returns it (default: the temporary directory itself, mode 0700)."""
        grpc = stubs()[0]  # before the daemon starts: a failed import must not leave it running
        self.dir = tempfile.mkdtemp(prefix="kjitd-py-")
        self.socket = os.path.join(socket_dir(self.dir) if socket_dir else self.dir, "kjitd.sock")
        self.proc = subprocess.Popen(
            [ARGS.kjitd, "--socket", self.socket, "--cache-dir", os.path.join(self.dir, "cache"),
             "--log-level", "warn", *extra], stderr=stderr, preexec_fn=preexec_fn)
        deadline = time.time() + 120
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.time() > deadline:
                self.proc.kill()
                raise RuntimeError("kjitd did not start")
            time.sleep(0.01)
        self.target = "unix://" + self.socket
        self.channel = grpc.insecure_channel(self.target, options=OPTIONS)
        grpc.channel_ready_future(self.channel).result(timeout=60)

    def wait_ready(self, timeout=120):
        """Waits for the end of the daemon's startup (the catalog compiled or loaded: ServerReady);
        before it, the kernel calls answer UNAVAILABLE "starting"."""
        _, _, _, pb, pbg, _, _ = stubs()
        infer = pbg.GRPCInferenceServiceStub(self.channel)
        deadline = time.time() + timeout
        while not infer.ServerReady(pb.ServerReadyRequest(), timeout=10).ready:
            if self.proc.poll() is not None or time.time() > deadline:
                self.proc.kill()
                raise RuntimeError("kjitd did not finish its startup")
            time.sleep(0.05)
        return self

    def peak_kib(self):
        """The daemon's peak resident memory so far (VmHWM), KiB."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            return int(next(l for l in f if l.startswith("VmHWM:")).split()[1])

    def stop(self):
        self.channel.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


NOBODY = 65534


def live_on_a_new_connection(target):
    """ServerLive on a channel of its own (a new connection to the daemon)."""
    grpc, _, _, pb, pbg, _, _ = stubs()
    channel = grpc.insecure_channel(target, options=OPTIONS)
    try:
        return pbg.GRPCInferenceServiceStub(channel).ServerLive(pb.ServerLiveRequest(), timeout=10).live
    finally:
        channel.close()


# flood(path, n): opens n connections to the Unix socket at `path` and returns them (still open on
# this side) with how many kjitd closed at once. Source text, so that a client run as another user
# (as_user) can define it too.
FLOOD_SOURCE = """
def flood(path, n):
    import socket, time
    held = []
    for _ in range(n):
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(path)
        held.append(c)
    time.sleep(0.5)
    refused = 0
    for c in held:
        c.setblocking(False)
        try:
            refused += c.recv(1) == b""  # closed by kjitd at once
        except BlockingIOError:
            pass  # still held
    return held, refused
"""
exec(FLOOD_SOURCE)


def as_user(script, uid=NOBODY, timeout=60):
    """Runs `script` (Python, with the stubs importable) as another user; returns (exit code, stdout)."""
    prelude = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {ARGS.stubs!r})
        import grpc
        from inference import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pbg
        from kjit.v1 import kernel_service_pb2 as kpb, kernel_service_pb2_grpc as kpbg
        def code(fn, req, metadata=None):
            try:
                fn(req, metadata=metadata, timeout=10)
                return "OK"
            except grpc.RpcError as e:
                return e.code().name
    """)

    def drop():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    p = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(script)], preexec_fn=drop,
                       capture_output=True, text=True, timeout=timeout, cwd="/")
    return p.returncode, p.stdout + p.stderr


def needs_root(test):
    return unittest.skipUnless(os.geteuid() == 0, "a second user needs uid 0 to switch to (CI runs as root)")(test)


def main():
    """Parses --kjitd, --stubs and --descriptors into ARGS, puts the stubs and client/python on the
    path, then runs the calling file's tests."""
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--kjitd", required=True)
    parser.add_argument("--stubs", required=True)
    parser.add_argument("--descriptors", required=True)  # build/proto/kjit_protos.desc
    ARGS, rest = parser.parse_known_args()
    sys.path.insert(0, ARGS.stubs)
    # kjit's Python package (client/python) first: it makes room for the stubs' kjit.v1.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python"))
    try:
        stubs()
    except ImportError as e:
        sys.exit(f"generated stubs missing under {ARGS.stubs} (build target kjit_proto_python): {e}")
    unittest.main(module="__main__", argv=[sys.argv[0], "-v", *rest])
