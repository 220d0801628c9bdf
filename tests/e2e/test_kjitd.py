#!/usr/bin/env python3
"""kjitd from a Python gRPC client (python3-grpcio + the generated stubs), the way SGLang workers
and tritonclient talk to it: reflection, health, metadata, system shared memory created by Python,
ModelInfer error codes, a launch ring driven by client/python/kjit (no compiled code), messages from
the build's descriptor set (kjit.descriptors, no generated modules), TCP when asked, a client
killed with SIGKILL releasing its session, and a stop during startup. The perimeter and the limits: test_kjitd_perimeter.py.

usage: test_kjitd.py --kjitd PATH --stubs DIR --descriptors FILE
"""
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import unittest
from multiprocessing import shared_memory

import kjitd_e2e as e2e
from kjitd_e2e import OPTIONS, Daemon, make_infer_request, stubs


class KjitdTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon().wait_ready()
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
        m = Messages(e2e.ARGS.descriptors)
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

    def infer_details(self, req):
        """(code, details) of a ModelInfer."""
        try:
            self.infer.ModelInfer(req)
            return self.grpc.StatusCode.OK, ""
        except self.grpc.RpcError as e:
            return e.code(), e.details()

    def test_fp8_cache_through_the_stock_protocol(self):
        # A UINT8 kv_cache with kjit_kv_dtype "fp8_e4m3" is valid: it stops where a valid bf16
        # request does on a daemon without a GPU, with either numerics.
        bf16 = self.infer_details(self.infer_request())
        self.assertEqual(bf16[0], self.grpc.StatusCode.FAILED_PRECONDITION)
        for numerics in (None, "dequant", "fp8"):
            req = make_infer_request(self.pb, fp8=True)
            if numerics:
                req.parameters["kjit_fp8_numerics"].string_param = numerics
            self.assertEqual(self.infer_details(req), bf16, numerics)
        # Each bad combination is INVALID_ARGUMENT saying what to fix: (fp8 request?, parameter
        # changes (None: removed), what the details must hold).
        cases = [
            (True, {"kjit_kv_dtype": None}, ["'kv_cache'", "set parameter 'kjit_kv_dtype' to \"fp8_e4m3\""]),
            (False, {"kjit_kv_dtype": "fp8_e4m3"}, ["'kv_cache'", "an fp8 cache travels as UINT8"]),
            (True, {"kjit_kv_dtype": "int4"}, ["'kjit_kv_dtype' is \"int4\"; use \"bf16\" or \"fp8_e4m3\""]),
            (False, {"kjit_fp8_numerics": "fp8"}, ["'kjit_fp8_numerics' applies to an fp8 cache only"]),
            (True, {"kjit_fp8_numerics": "e4m3"}, ["'kjit_fp8_numerics' is \"e4m3\"; use \"dequant\" or \"fp8\""]),
        ]
        for fp8, changes, wants in cases:
            req = make_infer_request(self.pb, fp8=True) if fp8 else self.infer_request()
            for name, value in changes.items():
                if value is None:
                    del req.parameters[name]
                else:
                    req.parameters[name].string_param = value
            code, details = self.infer_details(req)
            self.assertEqual(code, self.grpc.StatusCode.INVALID_ARGUMENT, (changes, details))
            for want in wants:
                self.assertIn(want, details, changes)

    def test_metadata_and_config_show_the_cache_and_its_parameters(self):
        mm = self.infer.ModelMetadata(self.pb.ModelMetadataRequest(name="mla_verify"))
        kv = [t for t in mm.inputs if t.name == "kv_cache"]
        self.assertEqual(len(kv), 1)
        self.assertEqual((kv[0].datatype, list(kv[0].shape)), ("BF16", [-1, 1, 576]))  # the usual one
        cfg = self.infer.ModelConfig(self.pb.ModelConfigRequest(name="mla_verify")).config
        listed = cfg.parameters["request_parameters"].string_value.split(", ")
        for name in ("kjit_kv_dtype", "kjit_fp8_numerics", "k_scale", "v_scale"):
            self.assertIn(name, listed)

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
                sys.path.insert(0, {e2e.ARGS.stubs!r})
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


class StartupTest(unittest.TestCase):
    def test_a_stop_during_startup_drops_the_compiles_left(self):
        # A cold cache's catalog for six archs: 132 compiles, minutes on two cores. The stop signals
        # stay blocked until startup ends, so a supervisor's SIGTERM used to wait for all of them;
        # now the compiles look for it, and only those then running finish.
        grpc, _, _, pb, pbg, _, _ = stubs()
        d = Daemon(["--arch", "sm_80,sm_86,sm_89,sm_90,sm_100,sm_120"])  # serving health, compiling
        infer = pbg.GRPCInferenceServiceStub(d.channel)
        self.assertFalse(infer.ServerReady(pb.ServerReadyRequest(), timeout=10).ready)
        time.sleep(1)
        t0 = time.time()
        self.assertEqual(d.stop(), 0)  # exit status 0: a stop asked for, not a failed startup
        self.assertLess(time.time() - t0, 20, "kjitd's stop waited for the catalog's compiles")


if __name__ == "__main__":
    e2e.main()
