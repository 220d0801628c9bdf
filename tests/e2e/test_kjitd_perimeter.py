#!/usr/bin/env python3
"""kjitd's perimeter and limits from Python gRPC clients: the Unix socket refuses other users, a
client maps only shared memory it could open itself, system shared memory over TCP only when
allowed, the shared token over TCP (--token-file), the fault-injection model only under its flag,
and the caps on messages, sessions, rings and memory.

usage: test_kjitd_perimeter.py --kjitd PATH --stubs DIR --descriptors FILE
"""
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
from multiprocessing import shared_memory

import kjitd_e2e as e2e
from kjitd_e2e import NOBODY, OPTIONS, Daemon, as_user, make_infer_request, needs_root, stubs


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
            # A ring's requests are held to --max-request-bytes as gRPC messages are, whatever the
            # ring's capacity: the poller copies them into kjitd's memory.
            kernels.CloseRing(kpb.CloseRingRequest(region="r2"))
            wide = LaunchRing(1 << 19)
            rings.append(wide)
            infer.SystemSharedMemoryRegister(
                pb.SystemSharedMemoryRegisterRequest(name="wide", key=wide.key, byte_size=wide.nbytes))
            kernels.OpenRing(kpb.OpenRingRequest(region="wide"))
            self.assertGreater(wide.capacity, 100000)
            code, message, response = wide.call(big.SerializeToString())
            self.assertEqual(code, grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
            self.assertIn("--max-request-bytes", message)
            self.assertEqual(response, b"")
            small = pb.ModelInferRequest(model_name="no_such_model")
            with self.assertRaises(grpc.RpcError) as ctx:
                infer.ModelInfer(small, timeout=10)
            code, message, _ = wide.call(small.SerializeToString())  # a small one is served as before
            self.assertEqual(code, ctx.exception.code().value[0])
            self.assertEqual(message, ctx.exception.details())
        finally:
            for s in stops:
                s.set()
            for r in rings:
                r.close()
            self.assertEqual(d.stop(), 0)

    def test_one_user_holds_three_quarters_of_a_limit(self):
        # Every limit counts all clients together: one user could take every session and ring. It
        # now gets three quarters of each (the rest is another user's), with a message that says so.
        from kjit import LaunchRing
        grpc, _, _, pb, pbg, kpb, kpbg = stubs()
        d = Daemon(["--max-sessions", "4", "--max-rings", "4"])
        infer = pbg.GRPCInferenceServiceStub(d.channel)
        kernels = kpbg.KernelServiceStub(d.channel)
        stop, rings = threading.Event(), []

        def requests():
            yield kpb.SessionRequest(client_name="share")
            stop.wait()
        streams = []
        try:
            for _ in range(3):
                streams.append(kernels.OpenSession(requests()))
                self.assertTrue(next(streams[-1]).session_id)
            streams.append(kernels.OpenSession(requests()))
            with self.assertRaises(grpc.RpcError) as ctx:
                next(streams[-1])
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertIn("3 open sessions, three quarters of kjitd's limit of 4", ctx.exception.details())
            for i in range(4):
                ring = LaunchRing(1 << 16)
                rings.append(ring)
                infer.SystemSharedMemoryRegister(
                    pb.SystemSharedMemoryRegisterRequest(name=f"r{i}", key=ring.key, byte_size=ring.nbytes))
            for i in range(3):
                kernels.OpenRing(kpb.OpenRingRequest(region=f"r{i}"))
            with self.assertRaises(grpc.RpcError) as ctx:
                kernels.OpenRing(kpb.OpenRingRequest(region="r3"))
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertIn("3 launch rings open, three quarters of kjitd's limit of 4", ctx.exception.details())
        finally:
            stop.set()
            for r in rings:
                r.close()
            self.assertEqual(d.stop(), 0)

    def test_a_long_client_name_ends_its_session(self):
        # Each session's stream kept the longest client_name it was sent (two copies) for its life:
        # 256 sessions could hold 64 GiB. A name over 256 bytes now ends the session.
        grpc, _, _, _, _, kpb, kpbg = stubs()
        d = Daemon()
        kernels = kpbg.KernelServiceStub(d.channel)
        try:
            stream = kernels.OpenSession(iter([kpb.SessionRequest(client_name="x" * (1 << 20))]), timeout=30)
            self.assertTrue(next(stream).session_id)
            with self.assertRaises(grpc.RpcError) as ctx:
                next(stream)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("client_name has 1048576 bytes; at most 256", ctx.exception.details())
            stream = kernels.OpenSession(iter([kpb.SessionRequest(client_name="y" * 256)]), timeout=30)
            self.assertTrue(next(stream).session_id)
            with self.assertRaises(StopIteration):  # ends OK when the client ends its side
                next(stream)
        finally:
            self.assertEqual(d.stop(), 0)

    def test_index_pointers_in_a_huge_sparse_object_cost_no_memory(self):
        # qo_indptr declared as 2^27 INT64 entries (1 GiB) of a sparse object: refused from the shapes
        # (batch <= 65535) before a byte of it is copied, by either family (the naive one copied and
        # widened it: 9 GB resident for a 2 GiB object).
        grpc, _, _, pb, pbg, _, _ = stubs()
        d = Daemon()
        infer = pbg.GRPCInferenceServiceStub(d.channel)
        shm = shared_memory.SharedMemory(create=True, size=1 << 30)
        try:
            infer.SystemSharedMemoryRegister(
                pb.SystemSharedMemoryRegisterRequest(name="huge", key="/" + shm.name, byte_size=1 << 30))
            for model in ("mla_verify", "mla_verify_naive"):
                self.refused_without_copying(d, infer, pb, model)
        finally:
            shm.close()
            shm.unlink()
            self.assertEqual(d.stop(), 0)

    def refused_without_copying(self, d, infer, pb, model):
        # The request of make_infer_request with its three index pointers (B + 1 = 2^27 entries each,
        # consistent, so that the batch bound is what refuses it) in the sparse region "huge".
        grpc = stubs()[0]
        inline = make_infer_request(pb)
        req = pb.ModelInferRequest()
        req.CopyFrom(inline)
        req.model_name = model
        del req.raw_input_contents[:]
        for t, raw in zip(req.inputs, inline.raw_input_contents):
            if t.name not in ("qo_indptr", "kv_indptr", "mask_indptr"):
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
        self.assertIn("batch", ctx.exception.details(), model)
        self.assertLess(rss_kib() - before, 64 * 1024, model)  # peak resident growth under 64 MiB

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

    def test_silent_connections_are_closed_and_descriptors_kept_for_clients(self):
        # kjitd under a limit of 256 descriptors, 300 connections that never send a byte: gRPC kept
        # such connections for good, and once the descriptors ran out neither new nor connected
        # clients could do anything that needs one. Now connections past the reserve (64 here) are
        # refused, a connected client still registers memory, and the silent ones close within 10 s.
        import resource
        grpc, _, _, pb, pbg, _, _ = stubs()
        log = tempfile.TemporaryFile(mode="w+")
        d = Daemon(stderr=log, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)))
        infer = pbg.GRPCInferenceServiceStub(d.channel)
        objects, silent = [], []

        def fds():
            return len(os.listdir(f"/proc/{d.proc.pid}/fd"))

        def register(name):
            shm = shared_memory.SharedMemory(create=True, size=4096)
            objects.append(shm)
            infer.SystemSharedMemoryRegister(
                pb.SystemSharedMemoryRegisterRequest(name=name, key="/" + shm.name, byte_size=4096), timeout=10)
        try:
            register("before")
            before = fds()
            for _ in range(300):
                c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                c.connect(d.socket)
                silent.append(c)
            time.sleep(0.5)
            self.assertLessEqual(fds(), 256 - 64 + 2)
            register("during")  # the reserve: a connected client is still served
            self.assertTrue(infer.ServerLive(pb.ServerLiveRequest(), timeout=10).live)
            deadline = time.time() + 15
            while fds() > before + 2:
                self.assertLess(time.time(), deadline, f"{fds()} descriptors open, {before} before")
                time.sleep(0.2)
            for c in silent:  # each was closed by the daemon: refused, or silent too long
                c.settimeout(5)
                self.assertEqual(c.recv(1), b"")
            fresh = grpc.insecure_channel(d.target, options=OPTIONS)
            try:
                self.assertTrue(pbg.GRPCInferenceServiceStub(fresh).ServerLive(pb.ServerLiveRequest(), timeout=10).live)
            finally:
                fresh.close()
        finally:
            for c in silent:
                c.close()
            for shm in objects:
                shm.close()
                shm.unlink()
            self.assertEqual(d.stop(), 0)
        log.seek(0)
        text = log.read()
        log.close()
        self.assertIn("refusing connections on the Unix socket", text)

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


TOKEN = "0123456789abcdef0123456789abcdef"
# Every implemented method (PROTOCOL.md); the others answer UNIMPLEMENTED before any handler runs.
INFERENCE_METHODS = {"ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata", "ModelConfig",
                     "ModelInfer", "ModelStatistics", "RepositoryIndex", "CudaSharedMemoryRegister",
                     "CudaSharedMemoryUnregister", "CudaSharedMemoryStatus", "SystemSharedMemoryRegister",
                     "SystemSharedMemoryUnregister", "SystemSharedMemoryStatus"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def token_file(directory, text=TOKEN + "\n", mode=0o600):
    path = os.path.join(directory, "token")
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


class TokenTest(unittest.TestCase):
    """--token-file: calls over TCP carry kjit-token; the Unix socket and health need none."""

    @classmethod
    def setUpClass(cls):
        (cls.grpc, cls.hpb, cls.hpbg, cls.pb, cls.pbg, cls.kpb, cls.kpbg) = stubs()
        cls.tmp = tempfile.mkdtemp(prefix="kjit-token-")
        cls.port = free_port()
        cls.d = Daemon(["--listen", f"127.0.0.1:{cls.port}", "--token-file", token_file(cls.tmp)]).wait_ready()
        cls.tcp = cls.grpc.insecure_channel(f"127.0.0.1:{cls.port}", options=OPTIONS)
        cls.grpc.channel_ready_future(cls.tcp).result(timeout=30)

    @classmethod
    def tearDownClass(cls):
        cls.tcp.close()
        assert cls.d.stop() == 0
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def call(self, channel, service, method, metadata=None):
        """Calls `method` with an empty request: its status code and message."""
        pb = self.kpb if service.full_name.startswith("kjit.") else self.pb
        request = getattr(pb, method.input_type.name)()
        response = getattr(pb, method.output_type.name)
        path = f"/{service.full_name}/{method.name}"
        kw = dict(request_serializer=type(request).SerializeToString, response_deserializer=response.FromString)
        try:
            if method.client_streaming:
                list(channel.stream_stream(path, **kw)(iter([request]), metadata=metadata, timeout=10))
            elif method.server_streaming:
                list(channel.unary_stream(path, **kw)(request, metadata=metadata, timeout=10))
            else:
                channel.unary_unary(path, **kw)(request, metadata=metadata, timeout=10)
            return self.grpc.StatusCode.OK, ""
        except self.grpc.RpcError as e:
            return e.code(), e.details()

    def every_method(self):
        for service in (self.pb.DESCRIPTOR.services_by_name["GRPCInferenceService"],
                        self.kpb.DESCRIPTOR.services_by_name["KernelService"]):
            for method in service.methods:
                if service.name == "KernelService" or method.name in INFERENCE_METHODS:
                    yield service, method

    def test_every_method_over_tcp_needs_the_token(self):
        methods = list(self.every_method())
        self.assertGreaterEqual(len(methods), 25)
        for metadata in (None, (("kjit-token", "wrong"),), (("kjit-token", TOKEN[:-1] + "x"),),
                         (("kjit-token", TOKEN + "x"),)):
            for service, method in methods:
                code, message = self.call(self.tcp, service, method, metadata)
                self.assertEqual(code, self.grpc.StatusCode.UNAUTHENTICATED, (method.name, metadata, message))
                self.assertIn("kjit-token", message)
                self.assertNotIn(TOKEN, message)
        self.assertTrue(self.pbg.GRPCInferenceServiceStub(self.d.channel).ServerLive(self.pb.ServerLiveRequest()).live)

    def test_the_right_token_is_answered(self):
        md = (("kjit-token", TOKEN),)
        infer = self.pbg.GRPCInferenceServiceStub(self.tcp)
        self.assertTrue(infer.ServerLive(self.pb.ServerLiveRequest(), metadata=md, timeout=10).live)
        self.assertEqual(infer.ServerMetadata(self.pb.ServerMetadataRequest(), metadata=md, timeout=10).name, "kjit")
        kernels = self.kpbg.KernelServiceStub(self.tcp)
        self.assertGreater(len(kernels.ListKernels(self.kpb.ListKernelsRequest(), metadata=md, timeout=10).kernels), 0)
        try:  # compile-only: the launch itself is refused, after the token
            infer.ModelInfer(make_infer_request(self.pb), metadata=md, timeout=10)
            self.fail("ModelInfer ran on a compile-only daemon")
        except self.grpc.RpcError as e:
            self.assertEqual(e.code(), self.grpc.StatusCode.FAILED_PRECONDITION, e.details())
        session = kernels.OpenSession(iter([self.kpb.SessionRequest(client_name="t")]), metadata=md, timeout=10)
        self.assertTrue(next(session).session_id)
        session.cancel()

    def test_the_unix_socket_and_health_need_no_token(self):
        infer = self.pbg.GRPCInferenceServiceStub(self.d.channel)
        self.assertTrue(infer.ServerLive(self.pb.ServerLiveRequest(), timeout=10).live)
        kernels = self.kpbg.KernelServiceStub(self.d.channel)
        self.assertGreater(len(kernels.ListKernels(self.kpb.ListKernelsRequest(), timeout=10).kernels), 0)
        health = self.hpbg.HealthStub(self.tcp)
        self.assertEqual(health.Check(self.hpb.HealthCheckRequest(), timeout=10).status,
                         self.hpb.HealthCheckResponse.SERVING)


class TokenFileTest(unittest.TestCase):
    """kjitd refuses to start on a token file that is missing, empty, short or readable by others."""

    def start(self, path):
        tmp = tempfile.mkdtemp(prefix="kjit-token-file-")
        try:
            p = subprocess.run([e2e.ARGS.kjitd, "--socket", os.path.join(tmp, "kjitd.sock"), "--cache-dir",
                                os.path.join(tmp, "cache"), "--listen", f"127.0.0.1:{free_port()}",
                                "--token-file", path], capture_output=True, text=True, timeout=60)
            return p.returncode, p.stderr
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_bad_token_files_are_refused_with_what_to_fix(self):
        tmp = tempfile.mkdtemp(prefix="kjit-token-bad-")
        try:
            # One file, rewritten for each case.
            cases = [(lambda: token_file(tmp, mode=0o644), "chmod 600"),
                     (lambda: token_file(tmp, mode=0o640), "chmod 600"),
                     (lambda: token_file(tmp, text="\n"), "is empty"),
                     (lambda: token_file(tmp, text="short\n"), "at least 16"),
                     (lambda: token_file(tmp, text="has a space in it, sixteen+\n"), "printable ASCII"),
                     (lambda: os.path.join(tmp, "missing"), "cannot open"), (lambda: tmp, "not a regular file")]
            for make, why in cases:
                path = make()
                rc, err = self.start(path)
                self.assertEqual(rc, 1, (path, why, err))
                self.assertIn("--token-file", err)
                self.assertIn(why, err)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


class FaultInjectionTest(unittest.TestCase):
    """The faulting model exists only under --enable-fault-injection (tests/gpu/e2e_fault.sh drives it)."""

    def fault_request(self, pb):
        req = pb.ModelInferRequest(model_name="kjit_fault_inject")
        req.parameters["kjit_device"].int64_param = 0
        return req

    def test_without_the_flag_it_is_an_unknown_model(self):
        grpc, _, _, pb, pbg, _, _ = stubs()
        d = Daemon()
        try:
            infer = pbg.GRPCInferenceServiceStub(d.channel)
            with self.assertRaises(grpc.RpcError) as e:
                infer.ModelInfer(self.fault_request(pb), timeout=10)
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, e.exception.details())
            self.assertFalse(infer.ModelReady(pb.ModelReadyRequest(name="kjit_fault_inject"), timeout=10).ready)
            names = [m.name for m in infer.RepositoryIndex(pb.RepositoryIndexRequest(), timeout=10).models]
            self.assertNotIn("kjit_fault_inject", names)
            self.assertTrue(infer.ServerLive(pb.ServerLiveRequest(), timeout=10).live)
        finally:
            self.assertEqual(d.stop(), 0)

    def test_with_the_flag_it_compiles_and_reaches_the_device_check(self):
        grpc, _, _, pb, pbg, _, _ = stubs()
        d = Daemon(["--enable-fault-injection"])
        try:
            infer = pbg.GRPCInferenceServiceStub(d.channel)
            until = time.time() + 60
            while True:  # the daemon answers before its startup is done
                try:
                    infer.ModelInfer(self.fault_request(pb), timeout=10)
                    self.fail("the fault model launched on a compile-only daemon")
                except grpc.RpcError as e:
                    if e.code() == grpc.StatusCode.UNAVAILABLE and "starting" in e.details() and time.time() < until:
                        time.sleep(0.05)
                        continue
                    self.assertEqual(e.code(), grpc.StatusCode.FAILED_PRECONDITION, e.details())
                    self.assertIn("compile-only", e.details())
                    break
            self.assertTrue(infer.ServerReady(pb.ServerReadyRequest(), timeout=10).ready)
        finally:
            self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    e2e.main()
