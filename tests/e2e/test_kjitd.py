#!/usr/bin/env python3
"""kjitd from a Python gRPC client (python3-grpcio + the generated stubs), the way SGLang workers
and tritonclient talk to it: reflection, health, metadata, system shared memory created by Python,
ModelInfer error codes, a launch ring driven by client/python/kjit (no compiled code), messages from
the build's descriptor set (kjit.descriptors, no generated modules), TCP when asked, and a client
killed with SIGKILL releasing its session.

usage: test_kjitd.py --kjitd PATH --stubs DIR --descriptors FILE
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest
from multiprocessing import shared_memory

ARGS = None
MAX = 2**31 - 1
OPTIONS = [("grpc.max_send_message_length", MAX), ("grpc.max_receive_message_length", MAX)]


def stubs():
    import grpc
    from health.v1 import health_pb2, health_pb2_grpc
    from inference import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pbg
    from kjit.v1 import kernel_service_pb2 as kpb, kernel_service_pb2_grpc as kpbg
    return grpc, health_pb2, health_pb2_grpc, pb, pbg, kpb, kpbg


def make_infer_request(pb, qo=(0, 2)):
    import numpy as np
    req = pb.ModelInferRequest(model_name="mla_verify")
    req.parameters["sm_scale"].double_param = 0.14467963
    tensors = [
        ("q", "BF16", [2, 8, 576], np.zeros((2, 8, 576), np.uint16)),
        ("k_extend", "BF16", [2, 1, 576], np.zeros((2, 1, 576), np.uint16)),
        ("kv_cache", "BF16", [4, 1, 576], np.zeros((4, 1, 576), np.uint16)),
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

    def stop(self):
        self.channel.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class KjitdTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon()
        (cls.grpc, cls.hpb, cls.hpbg, cls.pb, cls.pbg, cls.kpb, cls.kpbg) = stubs()
        cls.infer = cls.pbg.GRPCInferenceServiceStub(cls.d.channel)
        cls.kernels = cls.kpbg.KernelServiceStub(cls.d.channel)

    @classmethod
    def tearDownClass(cls):
        assert cls.d.stop() == 0

    def code(self, fn, req, metadata=None):
        try:
            fn(req, metadata=metadata)
            return self.grpc.StatusCode.OK
        except self.grpc.RpcError as e:
            return e.code()

    def test_reflection_lists_our_services(self):
        # grpc.reflection.v1alpha ServerReflectionInfo with list_services (field 7) = "".
        call = self.d.channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            request_serializer=lambda b: b, response_deserializer=lambda b: b)
        replies = list(call(iter([b"\x3a\x00"]), timeout=10))
        self.assertEqual(len(replies), 1)
        for name in (b"inference.GRPCInferenceService", b"kjit.v1.KernelService", b"grpc.health.v1.Health"):
            self.assertIn(name, replies[0])

    def test_health_and_metadata(self):
        health = self.hpbg.HealthStub(self.d.channel)
        self.assertEqual(health.Check(self.hpb.HealthCheckRequest()).status,
                         self.hpb.HealthCheckResponse.SERVING)
        md = self.infer.ServerMetadata(self.pb.ServerMetadataRequest())
        self.assertEqual(md.name, "kjit")
        self.assertIn("cuda_shared_memory", md.extensions)
        mm = self.infer.ModelMetadata(self.pb.ModelMetadataRequest(name="mla_verify"))
        self.assertEqual([t.name for t in mm.outputs], ["o", "lse"])
        self.assertEqual(self.code(self.infer.ModelMetadata, self.pb.ModelMetadataRequest(name="nope")),
                         self.grpc.StatusCode.INVALID_ARGUMENT)

    def test_descriptor_set_messages_need_no_generated_modules(self):
        # client/python's kjit.descriptors: message classes from the build's descriptor set, the same
        # bytes as the generated modules' messages, and calls on two services.
        from kjit.descriptors import Messages
        m = Messages(ARGS.descriptors)
        req = m["inference.ModelInferRequest"](model_name="mla_verify", id="d-1")
        req.parameters["sm_scale"].double_param = 0.125
        t = req.inputs.add(name="q", datatype="BF16")
        t.shape.extend([2, 8, 576])
        same = self.pb.ModelInferRequest.FromString(req.SerializeToString())
        self.assertEqual((same.id, list(same.inputs[0].shape), same.parameters["sm_scale"].double_param),
                         ("d-1", [2, 8, 576], 0.125))
        metadata = m.method(self.d.channel, "inference.GRPCInferenceService", "ModelMetadata")
        mm = metadata(m["inference.ModelMetadataRequest"](name="mla_verify"), timeout=10)
        self.assertEqual([o.name for o in mm.outputs], ["o", "lse"])
        kernels = m.method(self.d.channel, "kjit.v1.KernelService", "ListKernels")
        families = {k.family for k in kernels(m["kjit.v1.ListKernelsRequest"](), timeout=10).kernels}
        self.assertIn("mla_verify", families)
        with self.assertRaises(KeyError):
            m.method(self.d.channel, "inference.GRPCInferenceService", "NoSuchMethod")

    def test_system_shared_memory_from_python(self):
        shm = shared_memory.SharedMemory(create=True, size=1 << 16)
        try:
            key = "/" + shm.name
            req = self.pb.SystemSharedMemoryRegisterRequest(name="py", key=key, offset=1024, byte_size=4096)
            self.infer.SystemSharedMemoryRegister(req)
            self.assertEqual(self.code(self.infer.SystemSharedMemoryRegister, req),
                             self.grpc.StatusCode.ALREADY_EXISTS)
            st = self.infer.SystemSharedMemoryStatus(self.pb.SystemSharedMemoryStatusRequest(name="py"))
            self.assertEqual(st.regions["py"].key, key)
            self.assertEqual(st.regions["py"].byte_size, 4096)
            bad = self.pb.SystemSharedMemoryRegisterRequest(name="py2", key=key, offset=1 << 16, byte_size=1)
            self.assertEqual(self.code(self.infer.SystemSharedMemoryRegister, bad),
                             self.grpc.StatusCode.INVALID_ARGUMENT)
            self.infer.SystemSharedMemoryUnregister(self.pb.SystemSharedMemoryUnregisterRequest(name="py"))
            self.infer.SystemSharedMemoryUnregister(self.pb.SystemSharedMemoryUnregisterRequest())
            st = self.infer.SystemSharedMemoryStatus(self.pb.SystemSharedMemoryStatusRequest())
            self.assertEqual(len(st.regions), 0)
        finally:
            shm.close()
            shm.unlink()

    def infer_request(self, qo=(0, 2)):
        return make_infer_request(self.pb, qo)

    def test_model_infer_codes(self):
        self.assertEqual(self.code(self.infer.ModelInfer, self.infer_request()),
                         self.grpc.StatusCode.FAILED_PRECONDITION)
        with self.assertRaises(self.grpc.RpcError) as ctx:
            self.infer.ModelInfer(self.infer_request(qo=(0, 1)))
        self.assertEqual(ctx.exception.code(), self.grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("'qo_indptr'", ctx.exception.details())

    def test_launch_ring_from_python(self):
        from kjit import LaunchRing, RingError  # client/python, with the stubs' kjit.v1 beside it
        ring = LaunchRing(1 << 20)
        try:
            self.infer.SystemSharedMemoryRegister(
                self.pb.SystemSharedMemoryRegisterRequest(name="pyring", key=ring.key, byte_size=ring.nbytes))
            opened = self.kernels.OpenRing(self.kpb.OpenRingRequest(region="pyring"))
            self.assertEqual(opened.capacity, ring.capacity)
            for req in (self.infer_request(), self.infer_request(qo=(0, 1))):
                with self.assertRaises(self.grpc.RpcError) as ctx:
                    self.infer.ModelInfer(req)
                code, message, response = ring.call(req.SerializeToString())
                self.assertEqual(code, ctx.exception.code().value[0])  # the same answer as over gRPC
                self.assertEqual(message, ctx.exception.details())
                self.assertEqual(response, b"")
            with self.assertRaises(RingError):
                ring.call(b"x" * (ring.capacity + 1))
            self.infer.SystemSharedMemoryUnregister(self.pb.SystemSharedMemoryUnregisterRequest(name="pyring"))
        finally:
            ring.close()

    def test_a_session_is_its_connections_own(self):
        shm = shared_memory.SharedMemory(create=True, size=4096)
        stop = threading.Event()
        def requests():
            yield self.kpb.SessionRequest(client_name="owner")
            stop.wait()
        # A second connection of the same process and user (its own subchannel pool).
        other = self.grpc.insecure_channel(self.d.target, options=[("grpc.use_local_subchannel_pool", 1)])
        try:
            stream = self.kernels.OpenSession(requests())
            sid = next(stream).session_id
            req = self.pb.SystemSharedMemoryRegisterRequest(name="conn", key="/" + shm.name, byte_size=64)
            md = [("kjit-session", sid)]
            self.assertEqual(self.code(self.pbg.GRPCInferenceServiceStub(other).SystemSharedMemoryRegister, req, md),
                             self.grpc.StatusCode.NOT_FOUND)
            self.assertEqual(self.code(self.infer.SystemSharedMemoryRegister, req, md), self.grpc.StatusCode.OK)
        finally:
            stop.set()
            other.close()
            shm.close()
            shm.unlink()

    def test_killed_client_releases_its_session(self):
        shm = shared_memory.SharedMemory(create=True, size=4096)
        try:
            child = textwrap.dedent(f"""
                import sys, threading, time
                sys.path.insert(0, {ARGS.stubs!r})
                import grpc
                from inference import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pbg
                from kjit.v1 import kernel_service_pb2 as kpb, kernel_service_pb2_grpc as kpbg
                ch = grpc.insecure_channel({self.d.target!r})
                def requests():  # keeps the session stream open until the process dies
                    yield kpb.SessionRequest(client_name="victim")
                    threading.Event().wait()
                stream = kpbg.KernelServiceStub(ch).OpenSession(requests())
                sid = next(stream).session_id
                pbg.GRPCInferenceServiceStub(ch).SystemSharedMemoryRegister(
                    pb.SystemSharedMemoryRegisterRequest(name="victim", key={"/" + shm.name!r}, byte_size=4096),
                    metadata=[("kjit-session", sid)])
                print("ready", flush=True)
                time.sleep(600)
            """)
            proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
            try:
                self.assertEqual(proc.stdout.readline().strip(), "ready")
                # The session's region is its own (unseen here), but its name is taken while it lives.
                st = self.infer.SystemSharedMemoryStatus(self.pb.SystemSharedMemoryStatusRequest())
                self.assertNotIn("victim", st.regions)
                mine = self.pb.SystemSharedMemoryRegisterRequest(name="victim", key="/" + shm.name, byte_size=64)
                self.assertEqual(self.code(self.infer.SystemSharedMemoryRegister, mine),
                                 self.grpc.StatusCode.ALREADY_EXISTS)
                time.sleep(0.2)  # the session must outlive the registration while the client lives
                self.assertEqual(self.code(self.infer.SystemSharedMemoryRegister, mine),
                                 self.grpc.StatusCode.ALREADY_EXISTS)
            finally:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                proc.stdout.close()
            deadline = time.time() + 10
            while time.time() < deadline:
                if self.code(self.infer.SystemSharedMemoryRegister, mine) == self.grpc.StatusCode.OK:
                    break
                time.sleep(0.02)
            st = self.infer.SystemSharedMemoryStatus(self.pb.SystemSharedMemoryStatusRequest())
            self.assertIn("victim", st.regions)  # ours now: the killed client's was released
            self.infer.SystemSharedMemoryUnregister(self.pb.SystemSharedMemoryUnregisterRequest(name="victim"))
            self.assertTrue(self.infer.ServerLive(self.pb.ServerLiveRequest()).live)
        finally:
            shm.close()
            shm.unlink()


class TcpTest(unittest.TestCase):
    def test_tcp_only_when_asked(self):
        grpc, _, _, pb, pbg, _, _ = stubs()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        d = Daemon(["--listen", f"127.0.0.1:{port}"])
        try:
            ch = grpc.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS)
            grpc.channel_ready_future(ch).result(timeout=30)
            self.assertTrue(pbg.GRPCInferenceServiceStub(ch).ServerLive(pb.ServerLiveRequest()).live)
            ch.close()
        finally:
            self.assertEqual(d.stop(), 0)


NOBODY = 65534


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


class PerimeterTest(unittest.TestCase):
    """Who may connect, and what a client may make kjitd open for it."""

    @needs_root
    def test_the_unix_socket_refuses_other_users(self):
        d = Daemon()  # the socket sits in a 0700 directory of kjitd's user
        try:
            rc, out = as_user(f"""
                ch = grpc.insecure_channel({d.target!r})
                print(code(pbg.GRPCInferenceServiceStub(ch).ServerLive, pb.ServerLiveRequest()))
            """)
            self.assertEqual(rc, 0, out)
            self.assertEqual(out.split()[-1], "UNAVAILABLE", out)
        finally:
            self.assertEqual(d.stop(), 0)

    @needs_root
    def test_a_client_maps_only_objects_it_could_open_itself(self):
        def group_dir(root):
            # The operator's setup: a directory of kjitd's group (setgid, so the socket gets it) for
            # the users who may connect; here nobody's group.
            os.chmod(root, 0o711)
            sock = os.path.join(root, "run")
            os.mkdir(sock)
            os.chown(sock, 0, NOBODY)
            os.chmod(sock, 0o2750)
            return sock
        d = Daemon(socket_dir=group_dir)
        grpc, _, _, pb, pbg, kpb, kpbg = stubs()
        objs = [shared_memory.SharedMemory(create=True, size=4096) for _ in range(3)]
        secret, theirs, open_to_all = ("/" + o.name for o in objs)
        os.chown("/dev/shm" + theirs, NOBODY, NOBODY)
        os.chmod("/dev/shm" + open_to_all, 0o666)
        objs[0].buf[:6] = b"secret"
        held = threading.Event()
        def requests():
            yield kpb.SessionRequest(client_name="root's client")
            held.wait()
        try:
            stream = kpbg.KernelServiceStub(d.channel).OpenSession(requests())
            root_session = next(stream).session_id
            rc, out = as_user(f"""
                ch = grpc.insecure_channel({d.target!r})
                infer = pbg.GRPCInferenceServiceStub(ch)
                reg = lambda name, key, md=None: code(infer.SystemSharedMemoryRegister,
                    pb.SystemSharedMemoryRegisterRequest(name=name, key=key, byte_size=64), md)
                print("secret", reg("a", {secret!r}))
                print("theirs", reg("b", {theirs!r}))
                print("open", reg("c", {open_to_all!r}))
                print("session", reg("d", {theirs!r}, [("kjit-session", {root_session!r})]))
                try:
                    infer.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(
                        name="a", key={secret!r}, byte_size=64), timeout=10)
                except grpc.RpcError as e:
                    print("message", e.details().replace(chr(10), " "))
            """)
            self.assertEqual(rc, 0, out)
            lines = dict(l.split(" ", 1) for l in out.splitlines() if " " in l)
            self.assertEqual(lines.get("secret"), "PERMISSION_DENIED", out)  # root's 0600 object
            self.assertEqual(lines.get("theirs"), "OK", out)
            self.assertEqual(lines.get("open"), "OK", out)
            self.assertEqual(lines.get("session"), "NOT_FOUND", out)  # root's session is not theirs
            self.assertIn("could map itself", lines.get("message", ""), out)
            self.assertNotIn("secret", lines.get("message", ""))
        finally:
            held.set()
            for o in objs:
                o.close()
                o.unlink()
            self.assertEqual(d.stop(), 0)


class LimitsTest(unittest.TestCase):
    def free_port(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def register_over_tcp(self, extra):
        grpc, _, _, pb, pbg, _, _ = stubs()
        port = self.free_port()
        d = Daemon(["--listen", f"127.0.0.1:{port}", *extra])
        shm = shared_memory.SharedMemory(create=True, size=4096)
        ch = grpc.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS)
        try:
            grpc.channel_ready_future(ch).result(timeout=30)
            try:
                pbg.GRPCInferenceServiceStub(ch).SystemSharedMemoryRegister(
                    pb.SystemSharedMemoryRegisterRequest(name="t", key="/" + shm.name, byte_size=64), timeout=10)
                return grpc.StatusCode.OK, ""
            except grpc.RpcError as e:
                return e.code(), e.details()
        finally:
            ch.close()
            shm.close()
            shm.unlink()
            self.assertEqual(d.stop(), 0)

    def test_system_shared_memory_over_tcp_only_when_allowed(self):
        grpc = stubs()[0]
        code, message = self.register_over_tcp([])
        self.assertEqual(code, grpc.StatusCode.PERMISSION_DENIED)
        self.assertIn("--allow-tcp-system-shm", message)
        self.assertEqual(self.register_over_tcp(["--allow-tcp-system-shm"])[0], grpc.StatusCode.OK)

    def test_message_size_sessions_and_rings_are_capped(self):
        from kjit import LaunchRing
        grpc, _, _, pb, pbg, kpb, kpbg = stubs()
        d = Daemon(["--max-request-bytes", "65536", "--max-sessions", "2", "--max-rings", "1"])
        infer = pbg.GRPCInferenceServiceStub(d.channel)
        kernels = kpbg.KernelServiceStub(d.channel)
        rings, stops = [], []
        try:
            big = pb.ModelInferRequest(model_name="mla_verify", raw_input_contents=[b"\0" * 100000])
            with self.assertRaises(grpc.RpcError) as ctx:
                infer.ModelInfer(big, timeout=10)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertTrue(infer.ServerLive(pb.ServerLiveRequest()).live)

            streams = []  # a stream the test drops would be cancelled, ending its session

            def session():
                stop = threading.Event()
                stops.append(stop)
                def requests():
                    yield kpb.SessionRequest(client_name="cap")
                    stop.wait()
                streams.append(kernels.OpenSession(requests()))
                return streams[-1]
            first = session()
            self.assertTrue(next(first).session_id)
            self.assertTrue(next(session()).session_id)
            with self.assertRaises(grpc.RpcError) as ctx:
                next(session())
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertIn("--max-sessions", ctx.exception.details())
            stops[0].set()  # the first session ends: room for another
            deadline = time.time() + 10
            while True:
                try:
                    self.assertTrue(next(session()).session_id)
                    break
                except grpc.RpcError:
                    self.assertLess(time.time(), deadline)
                    time.sleep(0.05)

            for name in ("r1", "r2"):
                ring = LaunchRing(1 << 16)
                rings.append(ring)
                infer.SystemSharedMemoryRegister(
                    pb.SystemSharedMemoryRegisterRequest(name=name, key=ring.key, byte_size=ring.nbytes))
            kernels.OpenRing(kpb.OpenRingRequest(region="r1"))
            with self.assertRaises(grpc.RpcError) as ctx:
                kernels.OpenRing(kpb.OpenRingRequest(region="r2"))
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            kernels.CloseRing(kpb.CloseRingRequest(region="r1"))
            kernels.OpenRing(kpb.OpenRingRequest(region="r2"))
        finally:
            for s in stops:
                s.set()
            for r in rings:
                r.close()
            self.assertEqual(d.stop(), 0)

    def test_index_pointers_in_a_huge_sparse_object_cost_no_memory(self):
        # qo_indptr declared as 2^27 INT64 entries (1 GiB) of a sparse object: refused from the shapes
        # (batch <= 65535) before a byte of it is copied.
        grpc, _, _, pb, pbg, _, _ = stubs()
        d = Daemon()
        infer = pbg.GRPCInferenceServiceStub(d.channel)
        shm = shared_memory.SharedMemory(create=True, size=1 << 30)
        try:
            infer.SystemSharedMemoryRegister(
                pb.SystemSharedMemoryRegisterRequest(name="huge", key="/" + shm.name, byte_size=1 << 30))
            inline = make_infer_request(pb)
            req = pb.ModelInferRequest()
            req.CopyFrom(inline)
            del req.raw_input_contents[:]
            for t, raw in zip(req.inputs, inline.raw_input_contents):
                if t.name != "qo_indptr":
                    req.raw_input_contents.append(raw)
                    continue
                t.datatype = "INT64"
                del t.shape[:]
                t.shape.append(1 << 27)
                t.parameters["shared_memory_region"].string_param = "huge"
                t.parameters["shared_memory_byte_size"].int64_param = 1 << 30

            def rss_kib():
                with open(f"/proc/{d.proc.pid}/status") as f:
                    return int(next(l for l in f if l.startswith("VmHWM:")).split()[1])
            before = rss_kib()
            with self.assertRaises(grpc.RpcError) as ctx:
                infer.ModelInfer(req, timeout=30)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, ctx.exception.details())
            self.assertLess(rss_kib() - before, 64 * 1024)  # peak resident growth under 64 MiB
        finally:
            shm.close()
            shm.unlink()
            self.assertEqual(d.stop(), 0)

    def test_out_of_memory_is_an_error_not_an_abort(self):
        # kjitd under an address-space limit that holds gRPC's copy of a 192 MiB request but not
        # kjitd's own: std::bad_alloc used to escape the ModelInfer thread and abort the daemon.
        import resource
        grpc, _, _, pb, pbg, _, _ = stubs()
        d = Daemon(["--max-request-bytes", str(1 << 30)],
                   preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)))
        try:
            infer = pbg.GRPCInferenceServiceStub(d.channel)
            with open(f"/proc/{d.proc.pid}/status") as f:
                vm_kib = int(next(l for l in f if l.startswith("VmSize:")).split()[1])
            room = (3 << 30) - vm_kib * 1024
            size = int(room * 0.45)  # gRPC's slices fit, kjitd's contiguous copy beside them does not
            big = pb.ModelInferRequest(model_name="mla_verify", raw_input_contents=[b"\0" * size])
            codes = set()
            for _ in range(3):
                try:
                    infer.ModelInfer(big, timeout=60)
                except grpc.RpcError as e:
                    codes.add(e.code())
            self.assertIsNone(d.proc.poll(), "kjitd exited")
            self.assertTrue(infer.ServerLive(pb.ServerLiveRequest()).live)
            self.assertIn(grpc.StatusCode.RESOURCE_EXHAUSTED, codes)
        finally:
            self.assertEqual(d.stop(), 0)

    def test_library_errors_are_rate_limited_and_client_text_stays_on_one_line(self):
        grpc, _, _, pb, pbg, kpb, kpbg = stubs()
        log = tempfile.TemporaryFile(mode="w+")
        d = Daemon(["--log-level", "info"], stderr=log)
        try:
            # A ModelInferRequest whose model_name (a proto3 string) is not UTF-8: protobuf logs an
            # error for each such message it parses.
            raw = d.channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                        request_serializer=lambda b: b, response_deserializer=lambda b: b)
            for _ in range(300):
                with self.assertRaises(grpc.RpcError):
                    raw(b"\x0a\x02\xff\xfe", timeout=10)
            def requests():
                yield kpb.SessionRequest(client_name="x\nkjitd error: forged")
            for _ in kpbg.KernelServiceStub(d.channel).OpenSession(requests()):
                pass
            time.sleep(0.3)
        finally:
            self.assertEqual(d.stop(), 0)
        log.seek(0)
        lines = log.read().splitlines()
        log.close()
        utf8 = [l for l in lines if "UTF-8" in l]
        self.assertGreaterEqual(len(utf8), 1, lines[-20:])
        self.assertLessEqual(len(utf8), 3, utf8)
        self.assertFalse([l for l in lines if l.startswith("kjitd error: forged")], lines)


if __name__ == "__main__":
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
    unittest.main(argv=[sys.argv[0], "-v", *rest])
