#!/usr/bin/env python3
"""The kjit Python package (client/python/kjit, ctypes over libkjit_client) against a real kjitd on a
temporary socket, with Debian's python3 and no torch: import without torch, mode selection and
its description, kernels fetched (in-process) or compiled (embedded) without a GPU, every error
path as a kjit.Error with its code, and a stuck or dead daemon answered within the deadline.

usage: test_kjit_client.py --kjitd PATH --lib LIBKJIT_CLIENT
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

ARGS = None
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))
TORCH_STANDIN = os.path.join(HERE, "..", "python", "torch_standin")  # tensors that are only metadata

INVALID_ARGUMENT, DEADLINE_EXCEEDED, FAILED_PRECONDITION, UNAVAILABLE = 3, 4, 9, 14


class Daemon:
    def __init__(self, extra=()):
        self.dir = tempfile.mkdtemp(prefix="kjit-client-py-")
        self.socket = os.path.join(self.dir, "kjitd.sock")
        self.args = [ARGS.kjitd, "--socket", self.socket, "--cache-dir", os.path.join(self.dir, "cache"),
                     "--log-level", "warn", *extra]
        self.start()
        self.target = "unix://" + self.socket

    def start(self):
        self.proc = subprocess.Popen(self.args)
        deadline = time.time() + 120
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.time() > deadline:
                self.proc.kill()
                raise RuntimeError("kjitd did not start")
            time.sleep(0.01)

    def kill(self):
        self.proc.kill()
        self.proc.wait()
        os.unlink(self.socket)  # a killed daemon leaves it: wait for the new one's below

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def client(kjit, target, modes, deadline_ms=5000, wait_s=60, **kw):
    # The daemon answers health before its startup is done: retry while it says UNAVAILABLE. Its
    # socket file exists a moment before it listens: retry a refused connection too.
    until = time.time() + wait_s
    while True:
        try:
            return kjit.Client(target=target, modes=modes, deadline_ms=deadline_ms, **kw)
        except kjit.Error as e:
            if time.time() > until or ("starting" not in e.message and "Connection refused" not in e.message):
                raise
            time.sleep(0.05)


class KjitClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.environ["KJIT_CLIENT_LIB"] = ARGS.lib
        import kjit

        cls.kjit = kjit
        cls.d = Daemon()

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_import_needs_no_torch(self):
        out = subprocess.run([sys.executable, "-c", "import sys, kjit; print('torch' in sys.modules)"],
                             env=dict(os.environ, PYTHONPATH=sys.path[0]), capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "False")

    def test_in_process_fetches_kernels_without_a_gpu(self):
        c = client(self.kjit, self.d.target, "in-process,remote")
        self.assertEqual(c.mode, "in-process")
        self.assertIn(self.d.target, c.description)
        c.prepare("sm_120")
        with self.assertRaises(self.kjit.Error) as e:
            c.prepare("sm_7")
        self.assertEqual(e.exception.code, INVALID_ARGUMENT)
        self.assertIn("sm_7", e.exception.message)
        c.close()

    def test_bad_modes_and_unreachable_daemons(self):
        with self.assertRaises(self.kjit.Error) as e:
            self.kjit.Client(target=self.d.target, modes="in-process,warp")
        self.assertEqual(e.exception.code, INVALID_ARGUMENT)
        self.assertIn("'warp'", e.exception.message)
        nowhere = "unix://" + os.path.join(self.d.dir, "no.sock")
        t0 = time.time()
        with self.assertRaises(self.kjit.Error) as e:
            self.kjit.Client(target=nowhere, modes=["in-process", "ring", "remote"], deadline_ms=500)
        self.assertLess(time.time() - t0, 5)
        self.assertEqual(e.exception.code, FAILED_PRECONDITION)
        for mode in ("in-process", "ring", "remote"):
            self.assertIn(mode + " (", e.exception.message)
        self.assertNotIsInstance(e.exception, self.kjit.Unsupported)
        self.assertTrue(issubclass(self.kjit.Unsupported, self.kjit.Error))

    def test_ring_and_remote_modes_open(self):
        for mode in ("ring", "remote"):
            c = client(self.kjit, self.d.target, mode, events=True)
            self.assertEqual(c.mode, mode)
            self.assertIn("IPC events", c.description)
            c.close()

    def test_embedded_compiles_into_the_cache(self):
        cache = os.path.join(self.d.dir, "embedded-cache")
        nowhere = "unix://" + os.path.join(self.d.dir, "no.sock")
        c = self.kjit.Client(target=nowhere, modes="in-process,embedded", deadline_ms=500, cache_dir=cache)
        self.assertEqual(c.mode, "embedded")
        self.assertIn("not in-process", c.description)
        c.prepare("sm_120")
        entries = [f for _, _, files in os.walk(cache) for f in files if f.endswith(".cubin")]
        self.assertEqual(len(entries), 20)  # H x mask x bf16 or fp8 cache
        c.close()

    @unittest.skipIf(os.path.exists("/proc/driver/nvidia/version"),
                     "stand-in tensors have fake addresses: only a machine without a GPU stops before using them")
    def test_verify_attention_with_an_fp8_cache_in_every_mode(self):
        # kjit.verify_attention on stand-in torch tensors through the library: an fp8 cache, as
        # float8_e4m3fn or as its uint8 bytes, with either numerics, passes every mode's checks and
        # only the missing GPU stops it (as a bf16 one); the family's checks apply to it.
        sys.path.insert(0, TORCH_STANDIN)
        try:
            import torch
        finally:
            sys.path.remove(TORCH_STANDIN)
        self.assertTrue(torch.__file__.startswith(TORCH_STANDIN), torch.__file__)
        kjit = self.kjit

        def args(kv_dtype, slots=64, width=576):
            n, h = 4, 8
            k_buffer = torch.Tensor((slots, 1, width), kv_dtype)
            k_extend = torch.Tensor((n, 1, 576), torch.bfloat16)
            return [torch.Tensor((n, h, 576), torch.bfloat16), k_extend, None,
                    torch.Tensor((n, h, 512), torch.bfloat16), k_buffer, k_buffer.narrow_last(512),
                    torch.Tensor((2,), torch.int32), torch.Tensor((2,), torch.int32), torch.Tensor((3,), torch.int64),
                    torch.Tensor((n * (3 + n),), torch.uint8), True, torch.Tensor((2,), torch.int64), n, 0.5, 2.0,
                    0.125]

        for mode in ("in-process", "ring", "remote"):
            c = client(kjit, self.d.target, mode)
            try:
                for kv_dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.uint8):
                    for numerics in ("dequant", "fp8"):
                        if kv_dtype is torch.bfloat16 and numerics == "fp8":
                            continue
                        with self.subTest(mode=mode, kv_dtype=kv_dtype, numerics=numerics):
                            with self.assertRaises(kjit.Error) as e:
                                kjit.verify_attention(*args(kv_dtype), fp8_numerics=numerics, client=c)
                            self.assertEqual(e.exception.code, FAILED_PRECONDITION, e.exception.message)
                with self.subTest(mode=mode, what="a 575-wide fp8 cache"):
                    bad = args(torch.float8_e4m3fn, width=575)
                    bad[5] = bad[4].narrow_last(512)
                    with self.assertRaises(kjit.Error) as e:
                        kjit.verify_attention(*bad, client=c)
                    self.assertEqual(e.exception.code, INVALID_ARGUMENT)
                    self.assertIn("'kv_cache'", e.exception.message)
            finally:
                c.close()

    def test_stuck_then_dead_daemon_within_the_deadline(self):
        d = Daemon()
        try:
            c = client(self.kjit, d.target, "in-process", deadline_ms=1500)
            d.proc.send_signal(signal.SIGSTOP)
            t0 = time.time()
            with self.assertRaises(self.kjit.Error) as e:
                c.prepare("sm_90")
            self.assertEqual(e.exception.code, DEADLINE_EXCEEDED)
            self.assertLess(time.time() - t0, 2 * 1.5 + 1.5)  # GetKernel's deadline, then ServerLive's
            d.proc.send_signal(signal.SIGCONT)
            d.proc.kill()
            d.proc.wait()
            t0 = time.time()
            with self.assertRaises(self.kjit.Error) as e:
                c.prepare("sm_86")
            self.assertIn(e.exception.code, (UNAVAILABLE, DEADLINE_EXCEEDED))
            self.assertLess(time.time() - t0, 4)
            c.close()
        finally:
            d.stop()

    def while_unavailable(self, fn, seconds):
        """Calls fn until it does not raise UNAVAILABLE (at most `seconds`)."""
        until = time.time() + seconds
        while True:
            try:
                return fn()
            except self.kjit.Error as e:
                if time.time() > until or e.code != UNAVAILABLE:
                    raise
                time.sleep(0.1)

    def test_a_client_finds_a_restarted_daemon(self):
        # Both archs compiled at startup (into the cache the restarted daemon loads again): prepare
        # then only fetches.
        d = Daemon(["--arch", "sm_90,sm_86"])
        try:
            warm = client(self.kjit, d.target, "in-process", deadline_ms=60000)
            self.while_unavailable(lambda: warm.prepare("sm_90"), 600)  # until startup compiled both
            warm.close()
            c = client(self.kjit, d.target, "in-process", deadline_ms=1500)
            c.prepare("sm_90")
            d.kill()
            t0 = time.time()
            with self.assertRaises(self.kjit.Error) as e:
                c.prepare("sm_86")
            self.assertIn(e.exception.code, (UNAVAILABLE, DEADLINE_EXCEEDED))
            self.assertLess(time.time() - t0, 4)
            d.start()
            self.while_unavailable(lambda: c.prepare("sm_86"), 120)  # the same client: its channel reconnects
            c.close()
        finally:
            d.stop()

    def test_the_token_over_tcp(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        tmp = tempfile.mkdtemp(prefix="kjit-client-token-")
        path = os.path.join(tmp, "token")
        with open(path, "w") as f:
            f.write("0123456789abcdef0123456789abcdef\n")
        os.chmod(path, 0o600)
        d = Daemon(["--listen", f"127.0.0.1:{port}", "--token-file", path])
        tcp = f"127.0.0.1:{port}"
        try:
            client(self.kjit, d.target, "in-process").close()  # up; the Unix socket needs no token
            with self.assertRaises(self.kjit.Error) as e:
                self.kjit.Client(target=tcp, modes="in-process", deadline_ms=5000)
            self.assertIn("requires a token", e.exception.message)
            self.assertIn("KJIT_TOKEN_FILE", e.exception.message)
            # Creating a client calls ServerLive and opens a session: both over TCP, with the token.
            client(self.kjit, tcp, "in-process", token_file=path).close()
            os.environ["KJIT_TOKEN_FILE"] = path
            try:
                client(self.kjit, tcp, "in-process").close()
            finally:
                del os.environ["KJIT_TOKEN_FILE"]
            with self.assertRaises(self.kjit.Error) as e:
                self.kjit.Client(target=tcp, modes="in-process", token_file=os.path.join(tmp, "missing"))
            self.assertEqual(e.exception.code, FAILED_PRECONDITION)
            self.assertIn("missing", e.exception.message)
        finally:
            d.stop()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kjitd", required=True)
    parser.add_argument("--lib", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
