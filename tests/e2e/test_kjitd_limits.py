#!/usr/bin/env python3
"""kjitd's limits from Python gRPC clients: system shared memory over TCP only when allowed, the caps
on messages, sessions, rings, memory and a launch's staging and each user's share of them, requests
that would parse to far more than their bytes, index pointers in sparse objects, connections that
never speak, descriptors kept for connected clients, and log lines.

usage: test_kjitd_limits.py --kjitd PATH --stubs DIR --descriptors FILE
"""
import os
import socket
import tempfile
import threading
import time
import unittest
from multiprocessing import shared_memory

import kjitd_e2e as e2e
from kjitd_e2e import OPTIONS, Daemon, make_infer_request, stubs


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
            # (half a MiB: a message past 1 MiB is refused before its parse, in the test below)
            stream = kernels.OpenSession(iter([kpb.SessionRequest(client_name="x" * (1 << 19))]), timeout=30)
            self.assertTrue(next(stream).session_id)
            with self.assertRaises(grpc.RpcError) as ctx:
                next(stream)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("client_name has 524288 bytes; at most 256", ctx.exception.details())
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

        before = d.peak_kib()
        with self.assertRaises(grpc.RpcError) as ctx:
            infer.ModelInfer(req, timeout=30)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, ctx.exception.details())
        self.assertIn("batch", ctx.exception.details(), model)
        self.assertLess(d.peak_kib() - before, 64 * 1024, model)  # peak resident growth under 64 MiB

    def test_a_launch_stages_at_most_max_staging_bytes(self):
        # A 576 KiB cache in a system shared memory region, past --max-staging-bytes 64 KiB: refused
        # before any GPU is involved (on a machine without one the small request below gets as far as
        # the device check instead), with the flag and the way out named.
        grpc, _, _, pb, pbg, _, _ = stubs()
        d = Daemon(["--max-staging-bytes", str(64 << 10)])
        shm = shared_memory.SharedMemory(create=True, size=1 << 20)
        try:
            infer = pbg.GRPCInferenceServiceStub(d.channel)
            infer.SystemSharedMemoryRegister(
                pb.SystemSharedMemoryRegisterRequest(name="cache", key="/" + shm.name, byte_size=1 << 20), timeout=10)
            small = make_infer_request(pb)
            try:
                infer.ModelInfer(small, timeout=30)
            except grpc.RpcError as e:
                self.assertNotEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, e.details())
            big = pb.ModelInferRequest()
            big.CopyFrom(small)
            del big.raw_input_contents[:]
            for t, raw in zip(big.inputs, small.raw_input_contents):
                if t.name != "kv_cache":
                    big.raw_input_contents.append(raw)
                    continue
                del t.shape[:]
                t.shape.extend([512, 1, 576])
                t.parameters["shared_memory_region"].string_param = "cache"
                t.parameters["shared_memory_byte_size"].int64_param = 512 * 576 * 2
            with self.assertRaises(grpc.RpcError) as ctx:
                infer.ModelInfer(big, timeout=30)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, ctx.exception.details())
            self.assertIn("--max-staging-bytes", ctx.exception.details())
            self.assertIn("CUDA shared memory", ctx.exception.details())
        finally:
            shm.close()
            shm.unlink()
            self.assertEqual(d.stop(), 0)

    def test_a_request_that_would_parse_to_far_more_than_its_bytes_is_refused_before_its_parse(self):
        # 20 MB of empty input tensors (2 bytes each on the wire, about 200 parsed) took kjitd 2.1 GB;
        # 20 MB of INT64 zeros parse to 160 MB. Both are refused from their bytes, over gRPC and
        # over a launch ring, and kjitd's peak memory stays a few times the request.
        from kjit import LaunchRing
        grpc, _, _, pb, pbg, kpb, kpbg = stubs()
        d = Daemon(["--max-request-bytes", str(64 << 20)])
        ring = None
        try:
            raw = d.channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                        request_serializer=lambda b: b, response_deserializer=lambda b: b)
            empty_inputs = b"\x0a\x0amla_verify" + b"\x2a\x00" * 10_000_000
            zeros = pb.ModelInferRequest(model_name="mla_verify")
            zeros.inputs.add(name="kv_indices", datatype="INT64", shape=[20_000_000])
            zeros.inputs[0].contents.int64_contents.extend([0] * 20_000_000)
            zeros = zeros.SerializeToString()
            self.assertLess(len(zeros), 21 << 20)
            before = d.peak_kib()
            for body, code, says in ((empty_inputs, grpc.StatusCode.INVALID_ARGUMENT, "more than 128 inputs"),
                                     (zeros, grpc.StatusCode.RESOURCE_EXHAUSTED, "raw_input_contents or in shared memory")):
                with self.assertRaises(grpc.RpcError) as ctx:
                    raw(body, timeout=60)
                self.assertEqual(ctx.exception.code(), code)
                self.assertIn(says, ctx.exception.details())
            grown_mib = (d.peak_kib() - before) / 1024
            self.assertLess(grown_mib, 200, f"kjitd's peak memory grew {grown_mib:.0f} MiB for 20 MB requests")

            infer = pbg.GRPCInferenceServiceStub(d.channel)
            ring = LaunchRing(48 << 20)
            infer.SystemSharedMemoryRegister(
                pb.SystemSharedMemoryRegisterRequest(name="ring", key=ring.key, byte_size=ring.nbytes))
            kpbg.KernelServiceStub(d.channel).OpenRing(kpb.OpenRingRequest(region="ring"))
            for body, code, says in ((empty_inputs, grpc.StatusCode.INVALID_ARGUMENT, "more than 128 inputs"),
                                     (zeros, grpc.StatusCode.RESOURCE_EXHAUSTED, "raw_input_contents or in shared memory")):
                got, message, response = ring.call(body)
                self.assertEqual(got, code.value[0], message)
                self.assertIn(says, message)
                self.assertEqual(response, b"")
            grown_mib = (d.peak_kib() - before) / 1024
            self.assertLess(grown_mib, 200, f"kjitd's peak memory grew {grown_mib:.0f} MiB for 20 MB requests")
            self.assertTrue(infer.ServerLive(pb.ServerLiveRequest()).live)
        finally:
            if ring is not None:
                ring.close()
            self.assertEqual(d.stop(), 0)

    def test_control_requests_are_checked_before_their_parse(self):
        # Every method's request but ModelInfer's (and each message of a session) takes at most
        # 1 MiB, checked from its bytes: a 20 MB Compile of empty specialization names used to parse to
        # about 0.9 GB, 20 MB of undefined fields to about 150 MB. Bytes that are not the method's
        # request are INVALID_ARGUMENT, a method kjitd lacks or a name no service has UNIMPLEMENTED,
        # and the daemon serves on.
        grpc, hpb, hpbg, pb, pbg, kpb, kpbg = stubs()
        d = Daemon(["--max-request-bytes", str(64 << 20)]).wait_ready()
        try:

            def raw(method, body, stream=False):
                call = (d.channel.unary_stream if stream else d.channel.unary_unary)(
                    method, request_serializer=lambda b: b, response_deserializer=lambda b: b)
                with self.assertRaises(grpc.RpcError) as ctx:
                    out = call(body, timeout=60)
                    if stream:
                        list(out)
                return ctx.exception.code(), ctx.exception.details()

            empty_names = b"\x12\x0amla_verify" + b"\x1a\x00" * 10_000_000  # family, then 10M ""
            undefined = b"\xf8\x07\x00" * 7_000_000                            # field 127, varint 0
            cases = [("/kjit.v1.KernelService/Compile", empty_names, True, "kjit.v1.CompileRequest"),
                     ("/inference.GRPCInferenceService/ServerLive", undefined, False, "inference.ServerLiveRequest"),
                     ("/inference.GRPCInferenceService/ModelMetadata", undefined, False,
                      "inference.ModelMetadataRequest"),
                     ("/inference.GRPCInferenceService/CudaSharedMemoryRegister", undefined, False,
                      "inference.CudaSharedMemoryRegisterRequest"),
                     ("/kjit.v1.KernelService/OpenRing", undefined, False, "kjit.v1.OpenRingRequest"),
                     ("/grpc.health.v1.Health/Check", undefined, False, "grpc.health.v1.HealthCheckRequest"),
                     ("/grpc.health.v1.Health/Watch", undefined, True, "grpc.health.v1.HealthCheckRequest")]
            before = d.peak_kib()
            for method, body, stream, type_name in cases:
                code, details = raw(method, body, stream)
                self.assertEqual(code, grpc.StatusCode.RESOURCE_EXHAUSTED, (method, details))
                self.assertIn(f"a {type_name} of {len(body)} bytes", details)
                self.assertIn("at most 1048576", details)
            # A session's messages too: the session ends with the refusal.
            session = d.channel.stream_stream("/kjit.v1.KernelService/OpenSession", request_serializer=lambda b: b,
                                              response_deserializer=kpb.SessionEvent.FromString)
            events = session(iter([undefined]), timeout=60)
            with self.assertRaises(grpc.RpcError) as ctx:
                for event in events:
                    self.assertTrue(event.session_id)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, ctx.exception.details())
            self.assertIn(f"a kjit.v1.SessionRequest of {len(undefined)} bytes", ctx.exception.details())
            grown_mib = (d.peak_kib() - before) / 1024
            self.assertLess(grown_mib, 200, f"kjitd's peak memory grew {grown_mib:.0f} MiB for 20 MB requests")

            # At the bound a request is parsed and answered (its undefined fields ignored); past it
            # by one byte it is refused.
            # field 127 (undefined) with a 1048559-byte payload: 1048576 bytes in all
            body = b"\x0a\x0amla_verify" + b"\xfa\x07" + bytes([0xef, 0xff, 0x3f]) + b"x" * 1048559
            self.assertEqual(len(body), 1048576)
            metadata = d.channel.unary_unary("/inference.GRPCInferenceService/ModelMetadata",
                                             request_serializer=lambda b: b,
                                             response_deserializer=pb.ModelMetadataResponse.FromString)
            self.assertEqual(metadata(body, timeout=60).name, "mla_verify")
            code, details = raw("/inference.GRPCInferenceService/ModelMetadata", body + b"\x00")
            self.assertEqual(code, grpc.StatusCode.RESOURCE_EXHAUSTED, details)

            code, details = raw("/inference.GRPCInferenceService/ModelMetadata", b"\x0a\xff\x01abc")
            self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, details)
            self.assertIn("are not a inference.ModelMetadataRequest", details)
            code, details = raw("/kjit.v1.KernelService/Compile", b"\x0a", stream=True)
            self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, details)
            code, details = raw("/inference.GRPCInferenceService/RepositoryModelLoad", undefined)
            self.assertEqual(code, grpc.StatusCode.RESOURCE_EXHAUSTED, details)
            code, details = raw("/inference.GRPCInferenceService/RepositoryModelLoad", b"\x12\x03abc")
            self.assertEqual(code, grpc.StatusCode.UNIMPLEMENTED, details)
            code, details = raw("/inference.GRPCInferenceService/NoSuchMethod", undefined)
            self.assertEqual(code, grpc.StatusCode.UNIMPLEMENTED, details)
            self.assertIn("kjitd has no method /inference.GRPCInferenceService/NoSuchMethod", details)

            infer = pbg.GRPCInferenceServiceStub(d.channel)
            self.assertTrue(infer.ServerLive(pb.ServerLiveRequest()).live)
            self.assertEqual(infer.ModelMetadata(pb.ModelMetadataRequest(name="mla_verify")).name, "mla_verify")
            self.assertEqual(hpbg.HealthStub(d.channel).Check(hpb.HealthCheckRequest()).status,
                             hpb.HealthCheckResponse.SERVING)
        finally:
            self.assertEqual(d.stop(), 0)

    def test_a_compile_that_repeats_a_name_compiles_it_once(self):
        # A specialization named 20,000 times (a 300 KB request) made 20,000 results, a cubin each,
        # which the call held to its end (about 130 KB apiece: 2.6 GB). Now each is compiled and
        # reported once, and kjitd's peak memory barely moves.
        grpc, _, _, pb, pbg, kpb, kpbg = stubs()
        d = Daemon().wait_ready()
        try:
            kernels = kpbg.KernelServiceStub(d.channel)
            names = [k.specialization for k in
                     kernels.ListKernels(kpb.ListKernelsRequest(family="mla_verify_naive"), timeout=30).kernels]
            self.assertGreaterEqual(len(names), 2)
            list(kernels.Compile(kpb.CompileRequest(family="mla_verify_naive", specializations=names[:2],
                                                    archs=["sm_90"]), timeout=300))  # into the cache

            def peak_mib():
                return d.peak_kib() / 1024
            before = peak_mib()
            request = kpb.CompileRequest(family="mla_verify_naive", specializations=[names[1], names[0]] * 10_000,
                                         archs=["sm_90"])
            progress = list(kernels.Compile(request, timeout=300))
            # Reported as they finish (two may compile at once): each name once, done counting up.
            self.assertEqual(sorted(p.specialization for p in progress), sorted(names[:2]))
            self.assertEqual([(p.done, p.total) for p in progress], [(1, 2), (2, 2)])
            self.assertTrue(all(p.cache_hit and not p.error for p in progress), progress)
            grown = peak_mib() - before
            self.assertLess(grown, 100, f"kjitd's peak memory grew {grown:.0f} MiB for one repeated name")
        finally:
            self.assertEqual(d.stop(), 0)

    def test_a_cancelled_compile_compiles_no_more(self):
        # A Compile whose client cancelled (or left) went on compiling every item it named, on every
        # core, for nobody, and kjitd's SIGTERM waited for all of it (minutes for a catalog). Now the
        # items not yet started are dropped: after the cancel at most the compiles then running finish.
        grpc, _, _, pb, pbg, kpb, kpbg = stubs()
        d = Daemon().wait_ready()
        try:
            kernels = kpbg.KernelServiceStub(d.channel)
            archs = ["sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]
            call = kernels.Compile(kpb.CompileRequest(family="mla_verify_naive", archs=archs), timeout=600)
            first = next(call)
            total = first.total
            self.assertGreaterEqual(total, 12)
            call.cancel()

            def compiles():
                return kernels.CacheStats(kpb.CacheStatsRequest(), timeout=30).compiles
            at_cancel = compiles()
            # Settled: no new compile for 3 s (each takes about a second here).
            last, since, deadline = at_cancel, time.time(), time.time() + 120
            while time.time() - since < 3 and time.time() < deadline:
                time.sleep(0.25)
                now = compiles()
                if now != last:
                    last, since = now, time.time()
            self.assertLess(time.time(), deadline, "compiles went on for two minutes after the cancel")
            running = os.cpu_count() or 1  # the compiles that may have been running at the cancel
            self.assertLessEqual(last - at_cancel, running,
                                 f"{last - at_cancel} compiles after the cancel, of {total} named")
            self.assertLess(last, total)
        finally:
            t0 = time.time()
            self.assertEqual(d.stop(), 0)  # within 30 s, or it raises
            self.assertLess(time.time() - t0, 20, "kjitd's stop waited for compiles")

    def test_large_requests_at_once_hold_at_most_the_grpc_memory_bound(self):
        # gRPC buffers each request whole before its handler runs, so connections sending large
        # requests at once held gigabytes between them (100 of 120 MiB: 5.5 GB). Its memory quota
        # (--max-grpc-memory-bytes) bounds that: past it calls are refused, RESOURCE_EXHAUSTED (or
        # a connection is closed, UNAVAILABLE), and kjitd serves on. MEMORY=1 runs it with no bound.
        grpc, _, _, pb, pbg, kpb, kpbg = stubs()
        bound = (1 << 40) if os.environ.get("MEMORY") == "1" else 256 << 20
        d = Daemon(["--max-grpc-memory-bytes", str(bound)]).wait_ready()
        channels = []
        try:
            req = make_infer_request(pb)
            req.raw_input_contents[0] = bytes(48 << 20)  # q oversized: INVALID_ARGUMENT when parsed
            body = req.SerializeToString()
            calls = 24  # 1152 MiB in flight at once
            channels = [grpc.insecure_channel(d.target, options=OPTIONS + [("grpc.use_local_subchannel_pool", 1)])
                        for _ in range(calls)]
            before = d.peak_kib() / 1024
            codes, lock = [], threading.Lock()

            def one(ch):
                try:
                    ch.unary_unary("/inference.GRPCInferenceService/ModelInfer")(body, timeout=120)
                    code = grpc.StatusCode.OK
                except grpc.RpcError as e:
                    code = e.code()
                with lock:
                    codes.append(code)
            threads = [threading.Thread(target=one, args=(ch,)) for ch in channels]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            grown = d.peak_kib() / 1024 - before
            g = grpc.StatusCode
            allowed = {g.INVALID_ARGUMENT, g.RESOURCE_EXHAUSTED, g.UNAVAILABLE}
            self.assertTrue(set(codes) <= allowed, codes)
            self.assertIn(grpc.StatusCode.INVALID_ARGUMENT, codes)  # some were received and checked
            # 395-400 MiB with the bound on this box, 625-750 without it
            self.assertLess(grown, 576, f"kjitd's peak grew {grown:.0f} MiB for a bound of 256")
            self.assertTrue(pbg.GRPCInferenceServiceStub(d.channel).ServerLive(pb.ServerLiveRequest(), timeout=10).live)
        finally:
            for ch in channels:
                ch.close()
            self.assertEqual(d.stop(), 0)

    def test_a_launch_that_would_wait_on_the_queue_thread_is_refused(self):
        # A synchronous launch with a kjit_wait_event waits on the host for up to --launch-timeout-ms.
        # Past 1 MiB (tensors inline) it is not given a thread of its own, and waited on the thread
        # that answers every client's ModelInfer and ServerLive: now it is refused there, before any
        # wait. A small one still gets its own thread (here: compile-only, refused after that).
        grpc, _, _, pb, pbg, kpb, kpbg = stubs()
        d = Daemon().wait_ready()
        try:
            infer = pbg.GRPCInferenceServiceStub(d.channel)
            for big in (True, False):
                req = make_infer_request(pb)
                req.parameters["kjit_wait_event"].string_param = "never"
                if big:  # a cache of 2,000 slots inline: 2.3 MB, a valid request
                    self.assertEqual(req.inputs[2].name, "kv_cache")
                    req.inputs[2].shape[:] = [2000, 1, 576]
                    req.raw_input_contents[2] = bytes(2000 * 576 * 2)
                with self.assertRaises(grpc.RpcError) as ctx:
                    infer.ModelInfer(req, timeout=30)
                if big:
                    self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, ctx.exception.details())
                    self.assertIn("kjit_wait_event is refused past 1048576 bytes", ctx.exception.details())
                    self.assertNotIn("retry", ctx.exception.details())  # a retry would be refused the same way
                    # A model kjitd lacks is said so, not hidden behind the refusal.
                    req.model_name = "no_such_model"
                    with self.assertRaises(grpc.RpcError) as unknown:
                        infer.ModelInfer(req, timeout=30)
                    self.assertNotEqual(unknown.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
                    self.assertIn("no_such_model", unknown.exception.details())
                else:
                    self.assertNotEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED,
                                        ctx.exception.details())
            self.assertTrue(infer.ServerLive(pb.ServerLiveRequest(), timeout=10).live)
        finally:
            self.assertEqual(d.stop(), 0)

    def test_calls_that_wait_hold_a_bounded_number_of_threads(self):
        # 300 Compile calls at once, most of them waiting for NVRTC (kjitd compiles as many at once as
        # its cores allow): gRPC started a thread for each, and each compile call more. Now at most
        # --max-sessions + 192 synchronous calls run, the rest are answered RESOURCE_EXHAUSTED at
        # once, and the daemon serves on. (The bound below leaves 64 threads for gRPC's own and the
        # compiles'; 03e329a went from 12 to 612 threads on two cores.)
        grpc, _, _, pb, pbg, kpb, kpbg = stubs()
        d = Daemon(["--max-sessions", "8"]).wait_ready()
        try:
            kernels = kpbg.KernelServiceStub(d.channel)
            codes, peak, done = {}, [0], threading.Event()
            lock = threading.Lock()

            def threads():
                with open(f"/proc/{d.proc.pid}/status") as f:
                    return int(next(l for l in f if l.startswith("Threads:")).split()[1])

            def sample():
                while not done.is_set():
                    peak[0] = max(peak[0], threads())
                    time.sleep(0.01)

            def compile_one(i):
                try:
                    arch = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90")[i % 5]
                    list(kernels.Compile(kpb.CompileRequest(family="mla_verify_naive", archs=[arch]), timeout=300))
                    code = grpc.StatusCode.OK
                except grpc.RpcError as e:
                    code = e.code()
                with lock:
                    codes[code] = codes.get(code, 0) + 1

            idle = threads()
            sampler = threading.Thread(target=sample)
            sampler.start()
            callers = [threading.Thread(target=compile_one, args=(i,)) for i in range(300)]
            for c in callers:
                c.start()
            for c in callers:
                c.join()
            done.set()
            sampler.join()
            self.assertEqual(sum(codes.values()), 300)
            self.assertLessEqual(set(codes), {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}, codes)
            self.assertGreater(codes.get(grpc.StatusCode.OK, 0), 0, codes)
            self.assertLess(peak[0] - idle, 8 + 192 + 64, f"kjitd went from {idle} to {peak[0]} threads")
            self.assertTrue(pbg.GRPCInferenceServiceStub(d.channel).ServerLive(pb.ServerLiveRequest()).live)
        finally:
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

    def test_silent_connections_are_closed_and_descriptors_kept_for_clients(self):
        # kjitd under a limit of 256 descriptors, 300 connections that never send a byte: gRPC kept
        # such connections for good, and once the descriptors ran out neither new nor connected
        # clients could do anything that needs one. Now connections past the reserve (64 here), or
        # past one user's share of the rest, are refused, a connected client still registers
        # memory, and the silent ones close within 10 s.
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
            self.assertTrue(e2e.live_on_a_new_connection(d.target))
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
        # One user: its share (three quarters of the 192 left) runs out first. The reserve against
        # every user together is test_one_user_cannot_take_every_connection's (perimeter, two users).
        self.assertIn("refusing a connection of uid", text)

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
    e2e.main()
