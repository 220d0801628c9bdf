#!/usr/bin/env python3
"""CPU tests of kjit.verify_attention's argument handling (client/python/kjit/torch_ops.py): the
kjit_mla_verify_args it packs for each k_buffer dtype (bf16; an fp8 e4m3 cache as float8_e4m3fn or
as its uint8 bytes), fp8_numerics, k_scale / v_scale, and what it refuses before anything is
launched. torch is a stand-in (torch_standin/: dtypes and tensors that are only metadata) and the
client records the packed struct instead of launching. Needs no numpy, torch or library:
python3 tests/python/test_kjit_torch_ops.py"""
import ctypes
import os
import struct
import sys
import unittest

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_STANDIN = os.path.join(HERE, "torch_standin")
sys.path[:0] = [TORCH_STANDIN, os.path.join(HERE, "..", "..", "client", "python")]

import torch  # noqa: E402

assert torch.__file__.startswith(TORCH_STANDIN), torch.__file__  # the stand-in, not a real torch
import kjit  # noqa: E402
from kjit import _native  # noqa: E402

INVALID_ARGUMENT = 3
H, N, SLOTS = 8, 4, 64


class RecordingClient:
    """kjit.Client's mla_verify: decodes the packed kjit_mla_verify_args of each call. Returns
    `needed` from the first call (a workspace request), 0 after."""

    def __init__(self, needed=0):
        self.calls = []
        self.needed = needed

    def mla_verify(self, address, stream):
        raw = ctypes.string_at(address, _native.VERIFY_BYTES)
        call = {"struct_size": struct.unpack_from("<Q", raw)[0], "stream": stream}
        for name, off in _native.TENSOR_OFFSET.items():
            t = _native.PACK_TENSOR.unpack_from(raw, off)
            call[name] = {"data": t[0], "dtype": t[1], "ndim": t[2], "shape": t[3:3 + t[2]],
                          "strides": t[7:7 + t[2]]}
        names = ("sm_scale", "k_scale", "v_scale", "is_causal", "max_draft", "max_prefix", "device", "workspace",
                 "workspace_bytes", "fp8_numerics")
        call.update(zip(names, _native.VERIFY_TAIL.unpack_from(raw, _native.TAIL_OFFSET)))
        self.calls.append(call)
        needed, self.needed = self.needed, 0
        return needed


def case(kv_dtype=torch.bfloat16):
    """verify_attention's positional arguments for B = 1, D = 4, P = 3, H = 8, and the cache."""
    k_buffer = torch.Tensor((SLOTS, 1, 576), kv_dtype)
    k_extend = torch.Tensor((N, 1, 576), torch.bfloat16)
    args = [torch.Tensor((N, H, 576), torch.bfloat16), k_extend, k_extend.narrow_last(512),
            torch.Tensor((N, H, 512), torch.bfloat16), k_buffer, k_buffer.narrow_last(512),
            torch.Tensor((2,), torch.int32), torch.Tensor((2,), torch.int32), torch.Tensor((3,), torch.int64),
            torch.Tensor((N * (3 + N),), torch.bool), True, torch.Tensor((2,), torch.int64), N, 0.5, 2.0, 0.125]
    return args


class VerifyArgsTest(unittest.TestCase):
    def launch(self, args, client=None, **kwargs):
        client = client or RecordingClient()
        kjit.verify_attention(*args, client=client, **kwargs)
        return client.calls

    def test_struct_layout_matches_the_header(self):
        # 8-byte struct_size, 12 tensors of 11 words, 10 words of scalars: fp8_numerics last.
        self.assertEqual(_native.TENSOR_BYTES, 88)
        self.assertEqual(_native.VERIFY_BYTES, 8 + 12 * 88 + 10 * 8)
        self.assertEqual(_native.FP8_NUMERICS_OFFSET, _native.VERIFY_BYTES - 8)
        self.assertEqual(_native.FP8_NUMERICS, {"dequant": 0, "fp8": 1})

    def test_bf16_cache(self):
        (call,) = self.launch(case())
        self.assertEqual(call["struct_size"], _native.VERIFY_BYTES)
        self.assertEqual(call["kv_cache"]["dtype"], _native.DTYPE_BF16)
        self.assertEqual(call["kv_cache"]["shape"], (SLOTS, 1, 576))
        self.assertEqual(call["kv_cache"]["strides"], (576, 576, 1))
        self.assertEqual(call["fp8_numerics"], 0)
        self.assertEqual((call["sm_scale"], call["k_scale"], call["v_scale"]), (0.125, 0.5, 2.0))
        self.assertEqual(call["v_extend"]["data"], 0)  # k_extend[..., :512] itself: not passed

    def test_fp8_cache_as_float8_e4m3fn_or_its_bytes(self):
        for kv_dtype, code in ((torch.float8_e4m3fn, _native.DTYPE_FP8_E4M3), (torch.uint8, _native.DTYPE_UINT8)):
            with self.subTest(kv_dtype=kv_dtype):
                args = case(kv_dtype)
                default, = self.launch(args)
                fp8, = self.launch(args, fp8_numerics="fp8")
                dequant, = self.launch(args, fp8_numerics="dequant")
                for call in (default, fp8, dequant):
                    self.assertEqual(call["kv_cache"]["dtype"], code)
                    self.assertEqual(call["kv_cache"]["data"], args[4].data_ptr())
                    self.assertEqual(call["kv_cache"]["strides"], (576, 576, 1))
                    self.assertEqual((call["k_scale"], call["v_scale"]), (0.5, 2.0))
                    self.assertEqual(call["q"]["dtype"], _native.DTYPE_BF16)  # everything else stays bf16
                    self.assertEqual(call["o"]["dtype"], _native.DTYPE_BF16)
                self.assertEqual([c["fp8_numerics"] for c in (default, fp8, dequant)], [0, 1, 0])

    def test_v_buffer_may_view_the_same_bytes_as_either_dtype(self):
        args = case(torch.uint8)
        args[5] = args[4].view(torch.float8_e4m3fn).narrow_last(512)
        (call,) = self.launch(args, fp8_numerics="fp8")
        self.assertEqual((call["kv_cache"]["dtype"], call["fp8_numerics"]), (_native.DTYPE_UINT8, 1))

    def test_v_buffer_of_another_element_size_is_unsupported(self):
        args = case(torch.float8_e4m3fn)
        args[5] = torch.Tensor((SLOTS, 1, 512), torch.bfloat16, address=args[4].data_ptr(),
                               strides=args[4].stride())
        with self.assertRaises(kjit.Unsupported) as raised:
            self.launch(args)
        self.assertIn("v_buffer (torch.bfloat16)", raised.exception.message)

    def test_fp8_numerics_with_a_bf16_cache_is_invalid_argument(self):
        client = RecordingClient()
        with self.assertRaises(kjit.Error) as raised:
            self.launch(case(), client, fp8_numerics="fp8")
        e = raised.exception
        self.assertNotIsInstance(e, kjit.Unsupported)  # not a fallback: the caller asked for fp8
        self.assertEqual(e.code, INVALID_ARGUMENT)
        self.assertIn("fp8_numerics='fp8' applies to an fp8 cache", e.message)
        self.assertIn("float8_e4m3fn", e.message)
        self.assertEqual(client.calls, [])

    def test_unknown_fp8_numerics_is_invalid_argument(self):
        for kv_dtype in (torch.bfloat16, torch.float8_e4m3fn):
            for value in ("FP8", "e5m2", None, ["fp8"]):
                with self.subTest(kv_dtype=kv_dtype, value=value):
                    client = RecordingClient()
                    with self.assertRaises(kjit.Error) as raised:
                        self.launch(case(kv_dtype), client, fp8_numerics=value)
                    self.assertEqual(raised.exception.code, INVALID_ARGUMENT)
                    self.assertIn("use 'dequant'", raised.exception.message)
                    self.assertEqual(client.calls, [])

    def test_other_cache_dtypes_are_unsupported(self):
        for kv_dtype in (torch.float16, torch.float8_e5m2, torch.float32):
            with self.subTest(kv_dtype=kv_dtype):
                args = case(kv_dtype)
                with self.assertRaises(kjit.Unsupported) as raised:
                    self.launch(args)
                self.assertIn(f"k_buffer in {kv_dtype}", raised.exception.message)
                self.assertIn("fp8 e4m3", raised.exception.message)

    def test_fp8_q_is_still_unsupported(self):
        args = case(torch.float8_e4m3fn)
        args[0] = torch.Tensor((N, H, 576), torch.float8_e4m3fn)
        with self.assertRaises(kjit.Unsupported) as raised:
            self.launch(args)
        self.assertIn("kjit takes bf16", raised.exception.message)

    def test_the_numerics_survive_a_workspace_request(self):
        client = RecordingClient(needed=4096)
        calls = self.launch(case(torch.float8_e4m3fn), client, fp8_numerics="fp8")
        self.assertEqual(len(calls), 2)
        self.assertEqual((calls[0]["workspace"], calls[0]["fp8_numerics"]), (0, 1))
        self.assertNotEqual(calls[1]["workspace"], 0)
        self.assertGreaterEqual(calls[1]["workspace_bytes"], 4096)
        self.assertEqual(calls[1]["fp8_numerics"], 1)
        self.assertEqual(calls[1]["kv_cache"]["dtype"], _native.DTYPE_FP8_E4M3)


class ClientMlaVerifyTest(unittest.TestCase):
    """kjit.Client.mla_verify over a stand-in for the library's kjit_mla_verify, which writes the
    workspace it needs through its last argument on every call (0 when it launched)."""

    def test_a_workspace_request_is_not_lost_to_another_threads_call(self):
        import threading
        client = object.__new__(kjit.Client)  # no library: only mla_verify's own state
        client._tls = threading.local()
        a_wrote, b_done = threading.Event(), threading.Event()

        def verify(handle, args, stream, needed_ref):
            needed = needed_ref._obj  # the c_uint64 behind ctypes.byref
            if args == "a":  # needs 4096 bytes; returns only after b's call wrote its 0
                needed.value = 4096
                a_wrote.set()
                b_done.wait(10)
                return _native.KJIT_WORKSPACE_TOO_SMALL
            a_wrote.wait(10)
            needed.value = 0
            b_done.set()
            return _native.KJIT_OK

        client._verify = verify
        client._handle = 1
        got = {}
        threads = [threading.Thread(target=lambda n=n: got.__setitem__(n, client.mla_verify(n, 0))) for n in "ab"]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        self.assertEqual(got, {"a": 4096, "b": 0})


if __name__ == "__main__":
    unittest.main()
