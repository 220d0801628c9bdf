#!/usr/bin/env python3
"""kjitd's operator surfaces against a compile-only daemon: Prometheus text on --metrics-listen
(metric names, and counters that move after a failed ModelInfer and a Compile), the flag's
refusals (a port in use), and `kjit status` / `kjit cache stats` reading the same daemon.

usage: test_metrics.py --kjitd PATH --kjit PATH --stubs DIR
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

ARGS = None

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def parse_metrics(text):
    """{(name, frozenset(labels)): value} of a Prometheus text exposition; TYPE lines in `types`."""
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            types[name] = kind
            continue
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        samples[(m.group(1), labels)] = float(m.group(3))
    return samples, types


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    def __init__(self, *extra):
        import grpc
        self.dir = tempfile.mkdtemp(prefix="kjitd-metrics-")
        self.socket = os.path.join(self.dir, "kjitd.sock")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [ARGS.kjitd, "--socket", self.socket, "--cache-dir", os.path.join(self.dir, "cache"),
             "--metrics-listen", f"127.0.0.1:{self.port}", "--log-level", "warn", *extra],
            stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 120
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.time() > deadline:
                self.proc.kill()
                raise RuntimeError("kjitd did not start: " + self.proc.stderr.read())
            time.sleep(0.01)
        self.target = "unix://" + self.socket
        self.channel = grpc.insecure_channel(self.target)
        grpc.channel_ready_future(self.channel).result(timeout=60)

    def scrape(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            self.assert_content_type = r.headers.get("Content-Type", "")
            return parse_metrics(r.read().decode())

    def stop(self):
        self.channel.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


def kjit(*args):
    return subprocess.run([ARGS.kjit, *args], capture_output=True, text=True, timeout=60)


class Metrics(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon()
        from health.v1 import health_pb2, health_pb2_grpc
        health = health_pb2_grpc.HealthStub(cls.d.channel)
        deadline = time.time() + 120
        while health.Check(health_pb2.HealthCheckRequest()).status != health_pb2.HealthCheckResponse.SERVING:
            assert time.time() < deadline, "kjitd never became SERVING"
            time.sleep(0.05)

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_names_types_and_state(self):
        samples, types = self.d.scrape()
        expect = {
            "kjit_launches_total": "counter", "kjit_launch_failures_total": "counter",
            "kjit_launch_latency_seconds": "histogram", "kjit_compile_seconds": "histogram",
            "kjit_kernels_obtained_total": "counter", "kjit_cache_hits_total": "counter",
            "kjit_cache_misses_total": "counter", "kjit_cache_evictions_total": "counter",
            "kjit_cache_corrupt_total": "counter", "kjit_cache_bytes": "gauge", "kjit_regions": "gauge",
            "kjit_events": "gauge", "kjit_sessions": "gauge", "kjit_rings": "gauge",
            "kjit_gpu_healthy": "gauge", "kjit_ready": "gauge", "kjit_compile_only": "gauge",
        }
        for name, kind in expect.items():
            self.assertEqual(types.get(name), kind, name)
        self.assertEqual(samples[("kjit_ready", frozenset())], 1)
        self.assertEqual(samples[("kjit_compile_only", frozenset())], 1)
        self.assertEqual(samples[("kjit_sessions_max", frozenset())], 256)
        self.assertEqual(samples[("kjit_regions", frozenset({("kind", "system")}))], 0)
        # Compile-only: no GPU, so no GPU health sample.
        self.assertFalse([k for k in samples if k[0] == "kjit_gpu_healthy"])
        for mode in ("grpc_sync", "grpc_async", "ring_sync", "ring_async"):
            self.assertIn(("kjit_launches_total", frozenset({("model", "mla_verify"), ("mode", mode)})), samples)
            self.assertIn(("kjit_launch_latency_seconds_bucket",
                           frozenset({("model", "mla_verify"), ("mode", mode), ("le", "+Inf")})), samples)
        self.assertIn("text/plain", self.d.assert_content_type)

    def test_failed_infer_moves_the_counters(self):
        import grpc
        from inference import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pbg
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
        from kjitd_e2e import make_infer_request
        before, _ = self.d.scrape()
        launches = ("kjit_launches_total", frozenset({("model", "mla_verify"), ("mode", "grpc_sync")}))
        failed = ("kjit_launch_failures_total", frozenset({("model", "mla_verify"), ("code", "FAILED_PRECONDITION")}))
        stub = pbg.GRPCInferenceServiceStub(self.d.channel)
        for _ in range(2):
            with self.assertRaises(grpc.RpcError) as e:
                stub.ModelInfer(make_infer_request(pb), timeout=30)
            self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        with self.assertRaises(grpc.RpcError) as e:
            stub.ModelInfer(pb.ModelInferRequest(model_name="no_such_model"), timeout=30)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        unknown = ("kjit_launch_failures_total", frozenset({("model", "unknown"), ("code", "INVALID_ARGUMENT")}))
        after, _ = self.d.scrape()
        self.assertEqual(after[launches] - before[launches], 2)
        self.assertEqual(after[failed] - before.get(failed, 0), 2)
        self.assertEqual(after[unknown] - before.get(unknown, 0), 1)
        # Failures are no latency samples.
        inf = ("kjit_launch_latency_seconds_count", frozenset({("model", "mla_verify"), ("mode", "grpc_sync")}))
        self.assertEqual(after[inf], 0)

    def test_compile_moves_compile_and_cache_metrics(self):
        from kjit.v1 import kernel_service_pb2 as kpb, kernel_service_pb2_grpc as kpbg
        stub = kpbg.KernelServiceStub(self.d.channel)
        req = kpb.CompileRequest(archs=["sm_90"], family="mla_verify_naive", specializations=["bool"])
        before, _ = self.d.scrape()
        first = list(stub.Compile(req, timeout=300))
        self.assertEqual([m.error for m in first], [""])
        mid, _ = self.d.scrape()
        second = list(stub.Compile(req, timeout=300))
        self.assertTrue(second[0].cache_hit)
        after, _ = self.d.scrape()
        compiled = ("kjit_kernels_obtained_total", frozenset({("origin", "compiled")}))
        memory = ("kjit_kernels_obtained_total", frozenset({("origin", "memory")}))
        count = ("kjit_compile_seconds_count", frozenset())
        self.assertEqual(mid[compiled] - before[compiled], 1)
        self.assertEqual(mid[count] - before[count], 1)
        self.assertGreater(mid[("kjit_compile_seconds_sum", frozenset())], before[("kjit_compile_seconds_sum", frozenset())])
        self.assertEqual(mid[("kjit_cache_misses_total", frozenset())] - before[("kjit_cache_misses_total", frozenset())], 1)
        self.assertEqual(after[memory] - mid[memory], 1)
        self.assertEqual(after[count], mid[count])
        self.assertGreater(after[("kjit_cache_bytes", frozenset())], 0)

    def test_status_and_cache_stats_read_the_same_daemon(self):
        r = kjit("status", "--json", "--target", self.d.target)
        self.assertEqual(r.returncode, 0, r.stderr)
        s = json.loads(r.stdout)
        self.assertEqual(s["health"], "SERVING")
        self.assertTrue(s["ready"])
        self.assertIn("compile-only", s["compile_only_reason"])
        self.assertEqual(s["gpus"], [])
        self.assertEqual(s["sessions"], 0)
        self.assertEqual(s["max_rings"], 64)
        self.assertEqual(s["metrics_listen"], f"127.0.0.1:{self.d.port}")
        self.assertEqual({m["model"] for m in s["models"]}, {"mla_verify", "mla_verify_naive"})
        self.assertTrue({"family", "specialization", "archs_compiled"} <= set(s["kernels"][0]))
        text = kjit("status", "--target", self.d.target)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("SERVING", text.stdout)
        self.assertIn("sessions 0/256", text.stdout)
        health = kjit("status", "--health", "--target", self.d.target)
        self.assertEqual((health.returncode, health.stdout.strip()), (0, "SERVING"))
        stats = kjit("cache", "stats", "--json", "--target", self.d.target)
        self.assertEqual(stats.returncode, 0, stats.stderr)
        c = json.loads(stats.stdout)
        samples, _ = self.d.scrape()
        self.assertEqual(c["misses"], samples[("kjit_cache_misses_total", frozenset())])
        self.assertEqual(c["directory"], os.path.join(self.d.dir, "cache"))

    def test_session_is_counted(self):
        from kjit.v1 import kernel_service_pb2 as kpb, kernel_service_pb2_grpc as kpbg
        import queue
        stub = kpbg.KernelServiceStub(self.d.channel)
        requests = queue.Queue()
        requests.put(kpb.SessionRequest(client_name="metrics test"))
        stream = stub.OpenSession(iter(requests.get, None))
        next(stream)  # the session id: the session is open
        samples, _ = self.d.scrape()
        self.assertEqual(samples[("kjit_sessions", frozenset())], 1)
        self.assertEqual(json.loads(kjit("status", "--json", "--target", self.d.target).stdout)["sessions"], 1)
        requests.put(None)
        stream.cancel()
        deadline = time.time() + 10
        while self.d.scrape()[0][("kjit_sessions", frozenset())] != 0:
            self.assertLess(time.time(), deadline)
            time.sleep(0.05)

    def test_port_in_use_is_refused(self):
        r = subprocess.run([ARGS.kjitd, "--socket", os.path.join(self.d.dir, "second.sock"),
                            "--metrics-listen", f"127.0.0.1:{self.d.port}"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(f"--metrics-listen 127.0.0.1:{self.d.port}: cannot listen", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.d.dir, "second.sock")))
        bad = subprocess.run([ARGS.kjitd, "--metrics-listen", "metrics.example:8002"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--metrics-listen", bad.stderr)


def listening_tcp_ports(pid):
    """TCP ports in LISTEN state on sockets the process holds (/proc/PID/fd against /proc/net/tcp*)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


class StatusWithToken(unittest.TestCase):
    def test_status_over_tcp_sends_the_token_file(self):
        """kjitd --token-file: `kjit status` over TCP answers with $KJIT_TOKEN_FILE's token, says
        UNAUTHENTICATED without it, and names an unreadable token file."""
        d = tempfile.mkdtemp(prefix="kjitd-token-")
        token = os.path.join(d, "token")
        with open(token, "w") as f:
            f.write("0123456789abcdef0123\n")
        os.chmod(token, 0o600)
        port = free_port()
        tcp = f"127.0.0.1:{port}"
        proc = subprocess.Popen([ARGS.kjitd, "--socket", os.path.join(d, "kjitd.sock"), "--cache-dir",
                                 os.path.join(d, "cache"), "--listen", tcp, "--token-file", token],
                                stderr=subprocess.DEVNULL)
        env = dict(os.environ, KJIT_TOKEN_FILE=token)
        try:
            deadline = time.time() + 60
            while subprocess.run([ARGS.kjit, "status", "--health", "--target", tcp], env=env, capture_output=True,
                                 timeout=60).returncode != 0:
                self.assertLess(time.time(), deadline, "kjitd over TCP never answered with the token")
                self.assertIsNone(proc.poll())
                time.sleep(0.05)
            ok = subprocess.run([ARGS.kjit, "status", "--json", "--target", tcp], env=env, capture_output=True,
                                text=True, timeout=60)
            self.assertEqual(ok.returncode, 0, ok.stderr)
            self.assertTrue(json.loads(ok.stdout)["ready"])
            bare = dict(os.environ)
            bare.pop("KJIT_TOKEN_FILE", None)
            refused = subprocess.run([ARGS.kjit, "status", "--target", tcp], env=bare, capture_output=True, text=True,
                                     timeout=60)
            self.assertNotEqual(refused.returncode, 0)
            self.assertIn("kjit-token", refused.stderr)
            missing = subprocess.run([ARGS.kjit, "cache", "stats", "--target", tcp],
                                     env=dict(bare, KJIT_TOKEN_FILE=os.path.join(d, "absent")), capture_output=True,
                                     text=True, timeout=60)
            self.assertNotEqual(missing.returncode, 0)
            self.assertIn("KJIT_TOKEN_FILE", missing.stderr)
            tab = os.path.join(d, "tab")
            with open(tab, "w") as f:
                f.write("0123456789\tabcdef0123\n")  # not valid gRPC metadata: refused before sending
            bad = subprocess.run([ARGS.kjit, "status", "--target", tcp], env=dict(bare, KJIT_TOKEN_FILE=tab),
                                 capture_output=True, text=True, timeout=60)
            self.assertNotEqual(bad.returncode, 0)
            self.assertIn("not printable ASCII", bad.stderr)
            # Over the Unix socket the token is not needed, and a stray $KJIT_TOKEN_FILE is not read.
            unix = subprocess.run([ARGS.kjit, "status", "--health", "--target", "unix://" + os.path.join(d, "kjitd.sock")],
                                  env=dict(bare, KJIT_TOKEN_FILE=os.path.join(d, "absent")), capture_output=True,
                                  text=True, timeout=60)
            self.assertEqual(unix.returncode, 0, unix.stderr)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            shutil.rmtree(d, ignore_errors=True)


class MetricsOff(unittest.TestCase):
    def test_off_by_default(self):
        """Without the flag kjitd opens no TCP port; with it, exactly the metrics port."""
        on = Daemon()
        try:
            self.assertEqual(listening_tcp_ports(on.proc.pid), {on.port})
        finally:
            on.stop()
        d = tempfile.mkdtemp(prefix="kjitd-nometrics-")
        sock = os.path.join(d, "kjitd.sock")
        proc = subprocess.Popen([ARGS.kjitd, "--socket", sock, "--cache-dir", os.path.join(d, "cache")],
                                stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 60
            while not os.path.exists(sock):
                self.assertLess(time.time(), deadline)
                self.assertIsNone(proc.poll())
                time.sleep(0.01)
            while kjit("status", "--health", "--target", "unix://" + sock).returncode != 0:
                self.assertLess(time.time(), deadline)
                time.sleep(0.05)
            self.assertEqual(listening_tcp_ports(proc.pid), set())
            self.assertEqual(json.loads(kjit("status", "--json", "--target", "unix://" + sock).stdout)["metrics_listen"], "")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            shutil.rmtree(d, ignore_errors=True)


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--kjitd", required=True)
    p.add_argument("--kjit", required=True)
    p.add_argument("--stubs", required=True)
    ARGS, rest = p.parse_known_args()
    sys.path.insert(0, ARGS.stubs)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
