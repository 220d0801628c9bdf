#!/usr/bin/env python3
"""kjitd's perimeter from Python gRPC clients: the Unix socket refuses other users, a client maps
only shared memory it could open itself, the shared token over TCP (--token-file) and the
fault-injection model only under its flag (the limits are test_kjitd_limits.py's).

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


def group_dir(root):
    """The operator's setup: a directory of kjitd's group (setgid, so the socket gets it) for the
    users who may connect; here nobody's group."""
    os.chmod(root, 0o711)
    sock = os.path.join(root, "run")
    os.mkdir(sock)
    os.chown(sock, 0, NOBODY)
    os.chmod(sock, 0o2750)
    return sock


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


    def test_a_ring_others_may_write_is_refused(self):
        # Whoever writes a launch ring's bytes runs launches as the client that opened it: with a
        # ring object of mode 0666, any local user could have made kjitd read and write that client's
        # regions. A ring's object must be the client's own, writable by nobody else.
        from kjit import LaunchRing
        grpc, _, _, pb, pbg, kpb, kpbg = stubs()
        d = Daemon()
        ring = LaunchRing(1 << 16)
        try:
            infer, kernels = pbg.GRPCInferenceServiceStub(d.channel), kpbg.KernelServiceStub(d.channel)
            for mode in (0o620, 0o602, 0o666):
                os.chmod("/dev/shm" + ring.key, mode)
                infer.SystemSharedMemoryRegister(
                    pb.SystemSharedMemoryRegisterRequest(name="ring", key=ring.key, byte_size=ring.nbytes), timeout=10)
                with self.assertRaises(grpc.RpcError) as ctx:
                    kernels.OpenRing(kpb.OpenRingRequest(region="ring"), timeout=10)
                self.assertEqual(ctx.exception.code(), grpc.StatusCode.PERMISSION_DENIED, oct(mode))
                self.assertIn("mode 0600", ctx.exception.details())
                infer.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest(name="ring"), timeout=10)
            os.chmod("/dev/shm" + ring.key, 0o600)
            infer.SystemSharedMemoryRegister(
                pb.SystemSharedMemoryRegisterRequest(name="ring", key=ring.key, byte_size=ring.nbytes), timeout=10)
            kernels.OpenRing(kpb.OpenRingRequest(region="ring"), timeout=10)
            code, message, _ = ring.call(b"\x0a\x04nope")  # served: an unknown model, answered through the ring
            self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT.value[0], message)
        finally:
            ring.close()
            self.assertEqual(d.stop(), 0)

    @needs_root
    def test_reflection_is_not_served_on_a_socket_other_users_reach(self):
        # The operator's group directory: other users' workers call kjitd, so gRPC's reflection,
        # which parses a request whole before any check, is answered UNIMPLEMENTED by name.
        d = Daemon(socket_dir=group_dir)
        try:
            call = d.channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                           request_serializer=lambda b: b, response_deserializer=lambda b: b)
            grpc = stubs()[0]
            with self.assertRaises(grpc.RpcError) as ctx:
                list(call(iter([b"\x3a\x00"]), timeout=30))
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
            self.assertIn("--reflection on", ctx.exception.details())
        finally:
            self.assertEqual(d.stop(), 0)

    @needs_root
    def test_one_user_cannot_take_every_connection(self):
        # kjitd under a limit of 256 descriptors keeps 64 in reserve, so 192 are left for
        # connections; root opens 200. Before, they took all 192 and nobody could not connect. Now
        # root holds at most three quarters of them (144) and nobody is served.
        import resource
        log = tempfile.TemporaryFile(mode="w+")
        d = Daemon(socket_dir=group_dir, stderr=log,
                   preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)))
        held = []
        try:
            held, refused = e2e.flood(d.socket, 200)
            self.assertGreaterEqual(refused, 200 - 144)
            self.assertLessEqual(refused, 200 - 144 + 8)  # a few descriptors are the test's own channel
            rc, out = as_user(f"""
                ch = grpc.insecure_channel({d.target!r})
                print(code(pbg.GRPCInferenceServiceStub(ch).ServerLive, pb.ServerLiveRequest()))
            """)
            self.assertEqual((rc, out.split()[-1]), (0, "OK"), out)
            # nobody's own 100 on top: about 30 fit below the reserve for every user together (64
            # descriptors), which refuses the rest.
            rc, out = as_user(e2e.FLOOD_SOURCE + f"print(flood({d.socket!r}, 100)[1])\n")
            self.assertEqual(rc, 0, out)
            self.assertGreaterEqual(int(out.split()[-1]), 50, out)
            for c in held:  # root closes its connections: it is served again
                c.close()
            held = []
            time.sleep(0.2)  # past ConnectionShare::kRecheck
            self.assertTrue(e2e.live_on_a_new_connection(d.target))
        finally:
            for c in held:
                c.close()
            self.assertEqual(d.stop(), 0)
        log.seek(0)
        text = log.read()
        log.close()
        self.assertIn("refusing a connection of uid 0", text)
        self.assertIn("refusing connections on the Unix socket", text)

    @needs_root
    def test_each_user_has_a_name_space_of_its_own(self):
        # A user cannot take a name before another (ALREADY_EXISTS) nor learn that it is in use:
        # root and nobody both register "input0", each sees and unregisters only its own.
        d = Daemon(socket_dir=group_dir)
        grpc, _, _, pb, pbg, kpb, kpbg = stubs()
        mine, theirs = (shared_memory.SharedMemory(create=True, size=4096) for _ in range(2))
        os.chown("/dev/shm/" + theirs.name, NOBODY, NOBODY)
        infer = pbg.GRPCInferenceServiceStub(d.channel)
        register = pb.SystemSharedMemoryRegisterRequest(name="input0", key="/" + mine.name, byte_size=64)
        try:
            infer.SystemSharedMemoryRegister(register, timeout=10)
            rc, out = as_user(f"""
                ch = grpc.insecure_channel({d.target!r})
                infer = pbg.GRPCInferenceServiceStub(ch)
                req = pb.SystemSharedMemoryRegisterRequest(name="input0", key={"/" + theirs.name!r}, byte_size=64)
                print("register", code(infer.SystemSharedMemoryRegister, req))
                print("again", code(infer.SystemSharedMemoryRegister, req))
                st = infer.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest(), timeout=10)
                print("keys", ",".join(r.key for r in st.regions.values()))
                print("unregister", code(infer.SystemSharedMemoryUnregister,
                                         pb.SystemSharedMemoryUnregisterRequest(name="input0")))
            """)
            self.assertEqual(rc, 0, out)
            lines = dict(l.split(" ", 1) for l in out.splitlines() if " " in l)
            self.assertEqual(lines.get("register"), "OK", out)
            self.assertEqual(lines.get("again"), "ALREADY_EXISTS", out)  # its own name, once
            self.assertEqual(lines.get("keys"), "/" + theirs.name, out)
            self.assertEqual(lines.get("unregister"), "OK", out)
            st = infer.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest(name="input0"), timeout=10)
            self.assertEqual([r.key for r in st.regions.values()], ["/" + mine.name])
            with self.assertRaises(grpc.RpcError) as again:
                infer.SystemSharedMemoryRegister(register, timeout=10)
            self.assertEqual(again.exception.code(), grpc.StatusCode.ALREADY_EXISTS)
        finally:
            for o in (mine, theirs):
                o.close()
                o.unlink()
            self.assertEqual(d.stop(), 0)

    @needs_root
    def test_two_users_open_rings_under_one_name(self):
        # Rings are keyed by the identity's region name too: root and nobody each register a region
        # "ring" on a ring object of their own and open a ring on it; each ring serves its owner's
        # calls, and nobody closing "ring" closes only its own.
        from kjit import LaunchRing
        d = Daemon(socket_dir=group_dir)
        grpc, _, _, pb, pbg, kpb, kpbg = stubs()
        infer = pbg.GRPCInferenceServiceStub(d.channel)
        kernels = kpbg.KernelServiceStub(d.channel)
        ring = LaunchRing(1 << 16)
        small = pb.ModelInferRequest(model_name="no_such_model").SerializeToString()
        try:
            infer.SystemSharedMemoryRegister(
                pb.SystemSharedMemoryRegisterRequest(name="ring", key=ring.key, byte_size=ring.nbytes), timeout=10)
            kernels.OpenRing(kpb.OpenRingRequest(region="ring"), timeout=10)
            ring_py = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python", "kjit",
                                   "ring.py")
            rc, out = as_user(f"""
                import importlib.util  # the ring module alone: "kjit" is the stubs' package here
                spec = importlib.util.spec_from_file_location("ring", {ring_py!r})
                ring_module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(ring_module)
                ring = ring_module.LaunchRing(1 << 16)
                ch = grpc.insecure_channel({d.target!r})
                infer = pbg.GRPCInferenceServiceStub(ch)
                kernels = kpbg.KernelServiceStub(ch)
                reg = pb.SystemSharedMemoryRegisterRequest(name="ring", key=ring.key, byte_size=ring.nbytes)
                print("register", code(infer.SystemSharedMemoryRegister, reg))
                print("open", code(kernels.OpenRing, kpb.OpenRingRequest(region="ring")))
                status, message, _ = ring.call({small!r})
                print("call", status, message.replace(" ", "_"))
                print("close", code(kernels.CloseRing, kpb.CloseRingRequest(region="ring")))
                ring.close()
            """)
            self.assertEqual(rc, 0, out)
            lines = dict(l.split(" ", 1) for l in out.splitlines() if " " in l)
            self.assertEqual(lines.get("register"), "OK", out)
            self.assertEqual(lines.get("open"), "OK", out)
            self.assertTrue(lines.get("call", "").startswith(str(grpc.StatusCode.INVALID_ARGUMENT.value[0])), out)
            self.assertIn("no_such_model", lines.get("call", ""), out)
            self.assertEqual(lines.get("close"), "OK", out)
            status, message, _ = ring.call(small)  # root's ring still serves
            self.assertEqual(status, grpc.StatusCode.INVALID_ARGUMENT.value[0], message)
            self.assertIn("no_such_model", message)
            kernels.CloseRing(kpb.CloseRingRequest(region="ring"), timeout=10)
        finally:
            ring.close()
            self.assertEqual(d.stop(), 0)


TOKEN = "0123456789abcdef0123456789abcdef"
# Every implemented method (PROTOCOL.md); the others answer UNIMPLEMENTED (RepositoryModelLoad and
# RepositoryModelUnload after the token).
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

    def call(self, channel, service, method, metadata=None, timeout=10):
        """Calls `method` with an empty request: its status code and message."""
        pb = (self.kpb if service.full_name.startswith("kjit.") else
              self.hpb if service.full_name.startswith("grpc.health.") else self.pb)
        request = getattr(pb, method.input_type.name)()
        response = getattr(pb, method.output_type.name)
        path = f"/{service.full_name}/{method.name}"
        kw = dict(request_serializer=type(request).SerializeToString, response_deserializer=response.FromString)
        try:
            if method.client_streaming:
                list(channel.stream_stream(path, **kw)(iter([request]), metadata=metadata, timeout=timeout))
            elif method.server_streaming:
                list(channel.unary_stream(path, **kw)(request, metadata=metadata, timeout=timeout))
            else:
                channel.unary_unary(path, **kw)(request, metadata=metadata, timeout=timeout)
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

    def test_the_token_is_checked_before_the_request_is_looked_at(self):
        # Over TCP without the token, a request past the control methods' 1 MiB, or one that does
        # not parse, is UNAUTHENTICATED: kjitd neither parses nor sizes a stranger's request.
        for path in ("/inference.GRPCInferenceService/ModelMetadata", "/kjit.v1.KernelService/GetKernel"):
            call = self.tcp.unary_unary(path, request_serializer=lambda b: b, response_deserializer=lambda b: b)
            for body in (b"\xf8\x07\x00" * 700_000, b"\x0a\xff\x01"):
                with self.assertRaises(self.grpc.RpcError) as ctx:
                    call(body, timeout=10)
                self.assertEqual(ctx.exception.code(), self.grpc.StatusCode.UNAUTHENTICATED, path)
        stream = self.tcp.unary_stream("/kjit.v1.KernelService/Compile", request_serializer=lambda b: b,
                                       response_deserializer=lambda b: b)
        with self.assertRaises(self.grpc.RpcError) as ctx:
            list(stream(b"\x1a\x00" * 600_000, timeout=10))
        self.assertEqual(ctx.exception.code(), self.grpc.StatusCode.UNAUTHENTICATED)

    def test_every_method_answers_an_empty_request_with_a_status(self):
        # Every method of the three services, the ones kjitd does not implement included, called
        # over the Unix socket with an empty request: a status from kjitd (never UNKNOWN, INTERNAL
        # or a daemon gone), UNIMPLEMENTED only where the protocol's method has no use in kjitd.
        g = self.grpc.StatusCode
        unimplemented = {"RepositoryModelLoad", "RepositoryModelUnload", "ModelStreamInfer"}
        services = [self.pb.DESCRIPTOR.services_by_name["GRPCInferenceService"],
                    self.kpb.DESCRIPTOR.services_by_name["KernelService"],
                    self.hpb.DESCRIPTOR.services_by_name["Health"]]
        called = 0
        for service in services:
            for method in service.methods:
                code, message = self.call(self.d.channel, service, method, timeout=3)
                called += 1
                self.assertIsNone(self.d.proc.poll(), f"kjitd exited on {method.name}")
                self.assertNotIn(code, (g.UNKNOWN, g.INTERNAL, g.UNAVAILABLE), (method.name, message))
                if method.name in unimplemented:
                    self.assertEqual(code, g.UNIMPLEMENTED, (method.name, message))
                    self.assertIn("kjitd", message, method.name)  # says what to use instead
                else:
                    self.assertNotEqual(code, g.UNIMPLEMENTED, (method.name, message))
        self.assertGreaterEqual(called, 30)

    def test_reflection_is_not_served_beside_tcp_unless_asked(self):
        # gRPC parses a reflection request whole, without the token (20 MB of undefined fields took
        # kjitd 350 MiB): with --listen and no --reflection on, its calls are answered UNIMPLEMENTED,
        # on either socket, from their name alone (0 MiB grown).
        path = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
        raw = dict(request_serializer=lambda b: b, response_deserializer=lambda b: b)

        def peak_mib():
            return self.d.peak_kib() / 1024
        before = peak_mib()
        for channel, body in ((self.tcp, b"\x3a\x00"), (self.d.channel, b"\x3a\x00"), (self.tcp, b"\x78\x00" * (10 << 20))):
            with self.assertRaises(self.grpc.RpcError) as ctx:
                list(channel.stream_stream(path, **raw)(iter([body]), timeout=30))
            self.assertEqual(ctx.exception.code(), self.grpc.StatusCode.UNIMPLEMENTED)
            self.assertIn("--reflection on", ctx.exception.details())
        grown = peak_mib() - before
        self.assertLess(grown, 100, f"kjitd's peak memory grew {grown:.0f} MiB for a 20 MB reflection request")
        self.assertTrue(self.pbg.GRPCInferenceServiceStub(self.d.channel).ServerLive(self.pb.ServerLiveRequest()).live)

    def test_tcp_clients_hold_at_most_three_quarters_of_the_watch_streams(self):
        # Health needs no token, and each Watch holds a thread: TCP clients, whom kjitd cannot tell
        # apart, together hold at most 48 of the 64, so a Unix user still gets one; past 64 nobody does.
        watch = lambda ch: self.hpbg.HealthStub(ch).Watch(self.hpb.HealthCheckRequest(), timeout=60)
        streams = []
        try:
            def opened(ch):
                s = watch(ch)
                try:
                    next(s)
                    streams.append(s)
                    return self.grpc.StatusCode.OK, ""
                except self.grpc.RpcError as e:
                    return e.code(), e.details()
            for i in range(48):
                self.assertEqual(opened(self.tcp)[0], self.grpc.StatusCode.OK, i)
            code, message = opened(self.tcp)
            self.assertEqual(code, self.grpc.StatusCode.RESOURCE_EXHAUSTED, message)
            self.assertIn("every TCP client together", message)
            for i in range(16):
                self.assertEqual(opened(self.d.channel)[0], self.grpc.StatusCode.OK, i)
            code, message = opened(self.d.channel)
            self.assertEqual(code, self.grpc.StatusCode.RESOURCE_EXHAUSTED, message)
            self.assertIn("at most 64 health Watch streams", message)
        finally:
            for s in streams:
                s.cancel()
        time.sleep(0.3)  # the daemon sees the cancels within 100 ms

    def test_reflection_on_serves_tcp_too(self):
        port = free_port()
        d = Daemon(["--listen", f"127.0.0.1:{port}", "--reflection", "on"])
        tcp = self.grpc.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS)
        try:
            call = tcp.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                     request_serializer=lambda b: b, response_deserializer=lambda b: b)
            replies = list(call(iter([b"\x3a\x00"]), timeout=30))
            self.assertEqual(len(replies), 1)
            self.assertIn(b"kjit.v1.KernelService", replies[0])
        finally:
            tcp.close()
            self.assertEqual(d.stop(), 0)

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
