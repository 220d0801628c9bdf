#!/usr/bin/env python3
"""CPU tests of kjit.sglang against a stand-in SGLang (sglang_standin/) and a stand-in kjit core
API (kjit_standin/, whose package path also holds client/python/kjit, so kjit.sglang is the real
code). Needs numpy only: python3 tests/python/test_kjit_sglang.py"""
import json
import logging
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

# The tests import from the source tree and start child interpreters: no bytecode written there.
sys.dont_write_bytecode = True
os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN_PATHS = [os.path.join(HERE, "kjit_standin"), os.path.join(HERE, "sglang_standin")]
sys.path[:0] = [path for path in STANDIN_PATHS if path not in sys.path]

import numpy as np  # noqa: E402

import kjit  # noqa: E402

assert kjit.__file__.startswith(STANDIN_PATHS[0]), kjit.__file__  # the stand-in, not the client
import kjit.sglang  # noqa: E402
from kjit.sglang import defrag, patch, verify  # noqa: E402
from kjit.sglang import launch_server as kjit_launch_server  # noqa: E402
from kjit.sglang import scheduler as kjit_scheduler  # noqa: E402
from sglang.srt import plugins  # noqa: E402
from sglang.srt import server_args as sglang_server_args  # noqa: E402
from sglang.srt import utils as sglang_utils  # noqa: E402
from sglang.srt.entrypoints import http_server  # noqa: E402
from sglang.srt.layers.attention.triton_backend import TritonAttnBackend  # noqa: E402
from sglang.srt.layers.attention.triton_ops import extend_attention  # noqa: E402
from sglang.srt.managers import scheduler as sglang_scheduler  # noqa: E402
from sglang.srt.managers.scheduler import build_batch  # noqa: E402
from sglang.srt.mem_cache import allocator as sglang_allocator  # noqa: E402
from sglang.srt.mem_cache.allocator import (  # noqa: E402
    PagedTokenToKVPoolAllocator,
    TokenToKVPoolAllocator,
)
from sglang.srt.mem_cache.swa_memory_pool import SWATokenToKVPoolAllocator  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.model_executor.model_runner import ModelRunner  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402

SWITCHES = ("KJIT_SGLANG", "KJIT_SGLANG_VERIFY", "KJIT_SGLANG_DEFRAG", "KJIT_SGLANG_FP8_NUMERICS")
KJIT_KEYWORDS = ("lse", "max_prefix", "fp8_numerics", "client")  # kjit.verify_attention's own
ORIGINALS = {
    (TritonAttnBackend, "forward_extend"): TritonAttnBackend.__dict__["forward_extend"],
    (TokenToKVPoolAllocator, "__init__"): TokenToKVPoolAllocator.__dict__["__init__"],
    (PagedTokenToKVPoolAllocator, "__init__"): PagedTokenToKVPoolAllocator.__dict__["__init__"],
    (SWATokenToKVPoolAllocator, "__init__"): SWATokenToKVPoolAllocator.__dict__["__init__"],
}
ARGV = ["--model-path", "standin/model", "--attention-backend", "triton",
        "--speculative-algorithm", "EAGLE", "--speculative-num-draft-tokens", "4"]


def server_args(**fields):
    return ServerArgs(model_path="standin/model", speculative_num_draft_tokens=4, **fields)


def assert_same_arguments(test, routed, fallback):
    """Both calls got the very same objects, parameter by parameter (kjit's own keywords aside:
    SGLang's kernel has none of them)."""
    test.assertEqual(set(routed) - set(KJIT_KEYWORDS), set(fallback))
    for name, value in fallback.items():
        test.assertIs(routed[name], value, name)


class KjitSglangTest(unittest.TestCase):
    """Clean switches, nothing installed and empty recorders around every test."""

    def setUp(self):
        self.saved_env = {name: os.environ.pop(name) for name in SWITCHES if name in os.environ}
        kjit.sglang.uninstall()
        kjit.reset()
        extend_attention.CALLS.clear()
        sglang_scheduler.CALLS.clear()

    def tearDown(self):
        kjit.sglang.uninstall()
        kjit.reset()
        for name in SWITCHES:
            os.environ.pop(name, None)
        os.environ.update(self.saved_env)

    def verify_step(self, runner=None, mode=ForwardMode.TARGET_VERIFY, **batch_args):
        runner = runner or ModelRunner(server_args())
        layer, q, k, v, batch = build_batch(runner, mode, **batch_args)
        return layer.forward(q, k, v, batch), runner


class VerifyRoutingTest(KjitSglangTest):
    def setUp(self):
        super().setUp()
        kjit.sglang.install(verify=True, defrag=False)

    def test_mla_target_verify_is_served_by_kjit(self):
        runner = ModelRunner(server_args())
        backend = runner.attn_backend
        sglang_fn = backend.extend_attention_fwd
        layer, q, k, v, batch = build_batch(runner, ForwardMode.TARGET_VERIFY)
        with self.assertLogs("kjit.sglang", logging.INFO) as logs:
            o = layer.forward(q, k, v, batch)
            layer.forward(q, k, v, batch)
        self.assertEqual(len(kjit.calls), 2)
        self.assertEqual(extend_attention.CALLS, [])
        self.assertTrue(np.all(o == kjit.OUTPUT_FILL))
        self.assertEqual(len([r for r in logs.records if "served by kjit" in r.getMessage()]), 1)
        call = kjit.calls[0]
        meta = backend.forward_metadata
        self.assertEqual(call["q_extend"].shape, (8, 4, 576))
        self.assertEqual(call["o_extend"].shape, (8, 4, 512))
        self.assertEqual(call["v_buffer"].shape[-1], 512)
        self.assertIs(call["custom_mask"], meta.custom_mask)
        self.assertIs(call["kv_indices"], meta.kv_indices)
        self.assertIs(call["mask_indptr"], meta.mask_indptr)
        self.assertIs(call["is_causal"], True)
        self.assertEqual(call["max_len_extend"], 4)
        self.assertEqual(call["sm_scale"], layer.scaling)
        self.assertIs(call["skip_prefix_custom_mask"], True)
        self.assertIs(backend.extend_attention_fwd, sglang_fn)
        self.assertEqual(kjit.sglang.stats()["served"], 2)

    def test_prefill_and_draft_extend_stay_on_triton(self):
        for mode in (ForwardMode.EXTEND, ForwardMode.DRAFT_EXTEND, ForwardMode.MIXED):
            with self.subTest(mode=mode.name):
                extend_attention.CALLS.clear()
                o, _ = self.verify_step(mode=mode, extend_len=3)
                self.assertEqual(len(extend_attention.CALLS), 1)
                self.assertTrue(np.all(o == extend_attention.OUTPUT_FILL))
        self.assertEqual(kjit.calls, [])

    def test_non_mla_target_verify_stays_on_triton(self):
        o, _ = self.verify_step(ModelRunner(server_args(), mla=False))
        self.assertEqual(kjit.calls, [])
        self.assertEqual(len(extend_attention.CALLS), 1)
        self.assertEqual(extend_attention.CALLS[0]["q_extend"].shape[-1], 128)

    def test_backend_built_before_install_is_routed(self):
        kjit.sglang.uninstall()
        runner = ModelRunner(server_args())
        kjit.sglang.install(verify=True, defrag=False)
        self.verify_step(runner)
        self.assertEqual(len(kjit.calls), 1)
        self.assertEqual(extend_attention.CALLS, [])

    def test_unsupported_falls_back_with_identical_arguments_and_logs_once(self):
        kjit.error = kjit.Unsupported("logit_cap > 0 is not implemented")
        runner = ModelRunner(server_args())
        layer, q, k, v, batch = build_batch(runner, ForwardMode.TARGET_VERIFY)
        with self.assertLogs("kjit.sglang", logging.WARNING) as logs:
            outputs = [layer.forward(q, k, v, batch) for _ in range(3)]
            kjit.error = kjit.Unsupported("sinks are not implemented")
            outputs += [layer.forward(q, k, v, batch) for _ in range(2)]
        self.assertEqual(len(kjit.calls), 5)
        self.assertEqual(len(extend_attention.CALLS), 5)
        for routed, fallback in zip(kjit.calls, extend_attention.CALLS):
            assert_same_arguments(self, routed, fallback)
        for o in outputs:
            self.assertTrue(np.all(o == extend_attention.OUTPUT_FILL))
        messages = [record.getMessage() for record in logs.records]
        self.assertEqual(len(messages), 2, messages)
        self.assertIn("logit_cap > 0 is not implemented", messages[0])
        self.assertIn("sinks are not implemented", messages[1])
        stats = kjit.sglang.stats()
        self.assertEqual((stats["served"], stats["fallbacks"]), (0, 5))
        self.assertEqual(len(stats["fallback_reasons"]), 2)

    def test_distinct_fallback_reasons_are_logged_up_to_a_bound(self):
        runner = ModelRunner(server_args())
        layer, q, k, v, batch = build_batch(runner, ForwardMode.TARGET_VERIFY)
        with self.assertLogs("kjit.sglang", logging.WARNING) as logs:
            for i in range(verify._MAX_LOGGED_REASONS + 10):
                kjit.error = kjit.Unsupported(f"reason {i}")
                layer.forward(q, k, v, batch)
        self.assertEqual(len(logs.records), verify._MAX_LOGGED_REASONS + 1)

    def test_other_kjit_errors_propagate(self):
        kjit.error = kjit.Error(13, "launch failed")
        runner = ModelRunner(server_args())
        sglang_fn = runner.attn_backend.extend_attention_fwd
        with self.assertRaises(kjit.Error) as raised:
            self.verify_step(runner)
        self.assertNotIsInstance(raised.exception, kjit.Unsupported)
        self.assertEqual(raised.exception.code, 13)
        self.assertEqual(extend_attention.CALLS, [])
        self.assertIs(runner.attn_backend.extend_attention_fwd, sglang_fn)

    def test_forward_extend_keeps_its_arguments_and_result(self):
        runner = ModelRunner(server_args())
        layer, q, k, v, batch = build_batch(runner, ForwardMode.TARGET_VERIFY)
        sinks = np.zeros(4, dtype=np.float32)
        o = runner.attn_backend.forward_extend(q, k, v, layer, batch, save_kv_cache=False,
                                               sinks=sinks)
        self.assertIs(kjit.calls[0]["sinks"], sinks)
        self.assertEqual(o.shape, (8, 4 * 512))
        self.assertTrue(np.all(o == kjit.OUTPUT_FILL))


class Fp8CacheTest(KjitSglangTest):
    """--kv-cache-dtype fp8_e4m3: the one-byte cache and the layer's scales reach kjit, with the
    configured numerics; a bf16 cache never gets them; SGLang's fallback gets its own arguments."""

    def fp8_step(self, scales=(0.5, 2.0), **install_args):
        kjit.sglang.install(verify=True, defrag=False, **install_args)
        runner = ModelRunner(server_args(kv_cache_dtype="fp8_e4m3"))
        layer, q, k, v, batch = build_batch(runner, ForwardMode.TARGET_VERIFY, kv_scales=scales)
        return layer.forward(q, k, v, batch), runner

    def test_fp8_cache_is_served_by_kjit_with_the_layer_scales(self):
        o, runner = self.fp8_step()
        self.assertEqual(len(kjit.calls), 1)
        self.assertEqual(extend_attention.CALLS, [])
        self.assertTrue(np.all(o == kjit.OUTPUT_FILL))
        call = kjit.calls[0]
        self.assertIs(call["k_buffer"], runner.token_to_kv_pool.get_key_buffer(0))
        self.assertEqual(call["k_buffer"].dtype, np.uint8)
        self.assertTrue(np.shares_memory(call["v_buffer"], call["k_buffer"]))
        self.assertEqual(call["v_buffer"].shape[-1], 512)
        self.assertEqual((call["k_scale"], call["v_scale"]), (0.5, 2.0))
        self.assertEqual(call["fp8_numerics"], "dequant")  # not passed: kjit's default
        self.assertEqual(kjit.sglang.stats()["served"], 1)

    def test_numerics_from_the_environment_and_the_argument(self):
        os.environ["KJIT_SGLANG_FP8_NUMERICS"] = "FP8"
        self.fp8_step()
        self.assertEqual(kjit.calls[-1]["fp8_numerics"], "fp8")
        self.fp8_step(fp8_numerics="dequant")  # the argument wins; a second install() sets it again
        self.assertEqual(kjit.calls[-1]["fp8_numerics"], "dequant")
        kjit.sglang.uninstall()  # back to the default
        os.environ.pop("KJIT_SGLANG_FP8_NUMERICS")
        self.fp8_step()
        self.assertEqual(kjit.calls[-1]["fp8_numerics"], "dequant")

    def test_a_bf16_cache_never_gets_fp8_numerics(self):
        kjit.sglang.install(verify=True, defrag=False, fp8_numerics="fp8")
        self.verify_step()
        self.assertEqual(len(kjit.calls), 1)
        self.assertEqual(kjit.calls[0]["k_buffer"].dtype, np.float16)
        self.assertEqual(kjit.calls[0]["fp8_numerics"], "dequant")
        self.assertEqual((kjit.calls[0]["k_scale"], kjit.calls[0]["v_scale"]), (1.0, 1.0))

    def test_fp8_fallback_gets_sglangs_own_arguments(self):
        kjit.error = kjit.Unsupported("an fp8 cache on this device")
        with self.assertLogs("kjit.sglang", logging.WARNING):
            o, _ = self.fp8_step(fp8_numerics="fp8")
        self.assertEqual(kjit.calls[0]["fp8_numerics"], "fp8")
        self.assertEqual(len(extend_attention.CALLS), 1)
        self.assertNotIn("fp8_numerics", extend_attention.CALLS[0])
        assert_same_arguments(self, kjit.calls[0], extend_attention.CALLS[0])
        self.assertEqual(extend_attention.CALLS[0]["k_buffer"].dtype, np.uint8)
        self.assertTrue(np.all(o == extend_attention.OUTPUT_FILL))

    def test_a_bad_numerics_value_stops_install(self):
        os.environ["KJIT_SGLANG_FP8_NUMERICS"] = "fp16"
        with self.assertRaisesRegex(ValueError, "KJIT_SGLANG_FP8_NUMERICS='fp16'.*dequant or fp8"):
            kjit.sglang.install()
        self.assertEqual(kjit.sglang.installed(), {"verify": False, "defrag": False})
        with self.assertRaisesRegex(ValueError, "fp8_numerics='e5m2'"):
            kjit.sglang.install(fp8_numerics="e5m2")
        self.assertEqual(kjit.sglang.installed(), {"verify": False, "defrag": False})
        os.environ["KJIT_SGLANG_FP8_NUMERICS"] = ""  # empty: the default
        self.assertEqual(kjit.sglang.resolve_fp8_numerics(), "dequant")


class InstallTest(KjitSglangTest):
    def test_install_twice_wraps_once(self):
        self.assertEqual(kjit.sglang.install(), {"verify": True, "defrag": True})
        self.assertEqual(kjit.sglang.install(), {"verify": True, "defrag": True})
        for (owner, name), original in ORIGINALS.items():
            self.assertIs(owner.__dict__[name].__wrapped__, original, owner.__name__)
        self.verify_step()
        self.assertEqual(len(kjit.calls), 1)

    def test_uninstall_restores_every_original(self):
        kjit.sglang.install()
        kjit.sglang.uninstall()
        for (owner, name), original in ORIGINALS.items():
            self.assertIs(owner.__dict__[name], original, owner.__name__)
        self.assertEqual(kjit.sglang.installed(), {"verify": False, "defrag": False})
        o, runner = self.verify_step()
        self.assertTrue(np.all(o == extend_attention.OUTPUT_FILL))
        self.assertFalse(runner.token_to_kv_pool_allocator.need_sort)

    def test_install_adds_parts_and_never_removes_them(self):
        self.assertEqual(kjit.sglang.install(verify=True, defrag=False),
                         {"verify": True, "defrag": False})
        self.assertEqual(kjit.sglang.install(verify=False, defrag=True),
                         {"verify": True, "defrag": True})

    def test_inherited_attribute_is_deleted_again(self):
        class NoOwnInit(TokenToKVPoolAllocator):
            pass

        replacement = patch._replace(NoOwnInit, "__init__", defrag.wrap)
        self.assertIn("__init__", NoOwnInit.__dict__)
        self.assertTrue(NoOwnInit(8, None, "cpu", None, False).need_sort)
        replacement.restore()
        self.assertNotIn("__init__", NoOwnInit.__dict__)
        self.assertFalse(NoOwnInit(8, None, "cpu", None, False).need_sort)

    def test_missing_required_target_raises_and_rolls_back(self):
        paged = sglang_allocator.PagedTokenToKVPoolAllocator
        del sglang_allocator.PagedTokenToKVPoolAllocator
        try:
            with self.assertRaisesRegex(RuntimeError, "KJIT_SGLANG_DEFRAG=0"):
                kjit.sglang.install(verify=False, defrag=True)
        finally:
            sglang_allocator.PagedTokenToKVPoolAllocator = paged
        self.assertIs(TokenToKVPoolAllocator.__dict__["__init__"],
                      ORIGINALS[(TokenToKVPoolAllocator, "__init__")])
        self.assertEqual(kjit.sglang.installed(), {"verify": False, "defrag": False})


class SwitchTest(KjitSglangTest):
    def check(self, env, expected, **arguments):
        os.environ.update(env)
        self.assertEqual(kjit.sglang.install(**arguments), expected)
        o, runner = self.verify_step()
        served = expected["verify"]
        self.assertTrue(np.all(o == (kjit.OUTPUT_FILL if served else extend_attention.OUTPUT_FILL)))
        self.assertEqual(runner.token_to_kv_pool_allocator.need_sort, expected["defrag"])

    def test_both_on_by_default(self):
        self.check({}, {"verify": True, "defrag": True})

    def test_verify_off(self):
        self.check({"KJIT_SGLANG_VERIFY": "0"}, {"verify": False, "defrag": True})
        self.assertIs(TritonAttnBackend.__dict__["forward_extend"],
                      ORIGINALS[(TritonAttnBackend, "forward_extend")])

    def test_defrag_off(self):
        self.check({"KJIT_SGLANG_DEFRAG": "off"}, {"verify": True, "defrag": False})

    def test_everything_off(self):
        self.check({"KJIT_SGLANG": "0", "KJIT_SGLANG_VERIFY": "1"},
                   {"verify": False, "defrag": False})

    def test_arguments_override_the_environment(self):
        self.check({"KJIT_SGLANG": "false", "KJIT_SGLANG_DEFRAG": "1"},
                   {"verify": True, "defrag": False}, verify=True)

    def test_values(self):
        for raw, value in (("1", True), ("TRUE", True), ("yes", True), (" on ", True),
                           ("0", False), ("False", False), ("no", False), ("OFF", False),
                           ("", True)):
            os.environ["KJIT_SGLANG_VERIFY"] = raw
            self.assertIs(patch.env_switch("KJIT_SGLANG_VERIFY"), value, raw)

    def test_bad_value_is_an_error(self):
        os.environ["KJIT_SGLANG_DEFRAG"] = "maybe"
        with self.assertRaisesRegex(ValueError, "KJIT_SGLANG_DEFRAG='maybe'"):
            kjit.sglang.install()
        self.assertEqual(kjit.sglang.installed(), {"verify": False, "defrag": False})


def alloc_free_alloc(allocator, unit):
    """Allocates the whole pool in three runs, frees the second, the first and part of the third,
    then allocates that much again; returns the slots of the last allocation."""
    first, second = allocator.alloc(4 * unit), allocator.alloc(4 * unit)
    third = allocator.alloc(allocator.available_size())
    allocator.free(second)
    allocator.free(first)
    allocator.free(third[: 4 * unit])
    return allocator.alloc(12 * unit)


class DefragTest(KjitSglangTest):
    def test_freed_slots_come_back_in_arbitrary_order_without_it(self):
        slots = alloc_free_alloc(TokenToKVPoolAllocator(16, None, "cpu", None, False), 1)
        self.assertFalse(np.all(np.diff(slots) == 1), slots)

    def test_freed_slots_come_back_ascending_and_contiguous(self):
        kjit.sglang.install(verify=False, defrag=True)
        allocator = TokenToKVPoolAllocator(16, dtype=None, device="cpu", kvcache=None,
                                           need_sort=False)
        self.assertTrue(allocator.need_sort)
        np.testing.assert_array_equal(alloc_free_alloc(allocator, 1), np.arange(1, 13))

    def test_paged_allocator_pages_come_back_ascending(self):
        page = 4
        unsorted = alloc_free_alloc(PagedTokenToKVPoolAllocator(64, page, None, "cpu", None,
                                                                False), page)
        self.assertFalse(np.all(np.diff(unsorted) == 1), unsorted)
        kjit.sglang.install(verify=False, defrag=True)
        allocator = PagedTokenToKVPoolAllocator(64, page, None, "cpu", None, False)
        self.assertTrue(allocator.need_sort)
        np.testing.assert_array_equal(alloc_free_alloc(allocator, page),
                                      np.arange(page, 13 * page))

    def test_swa_allocator_and_its_inner_allocators(self):
        kjit.sglang.install(verify=False, defrag=True)
        for page in (1, 4):
            allocator = SWATokenToKVPoolAllocator(64, 32, page, None, "cpu", None, False)
            self.assertTrue(allocator.need_sort)
            self.assertTrue(allocator.full_attn_allocator.need_sort)
            self.assertTrue(allocator.swa_attn_allocator.need_sort)

    def test_subclasses_of_patched_allocators(self):
        class DeviceAllocator(PagedTokenToKVPoolAllocator):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self.extra = True

        kjit.sglang.install(verify=False, defrag=True)
        self.assertTrue(DeviceAllocator(64, 4, None, "cpu", None, False).need_sort)

    def test_model_runner_allocator_and_existing_ones(self):
        before = ModelRunner(server_args())
        kjit.sglang.install(verify=False, defrag=True)
        self.assertTrue(ModelRunner(server_args()).token_to_kv_pool_allocator.need_sort)
        self.assertTrue(ModelRunner(server_args(page_size=4)).token_to_kv_pool_allocator.need_sort)
        self.assertFalse(before.token_to_kv_pool_allocator.need_sort)


class LaunchServerTest(KjitSglangTest):
    def setUp(self):
        super().setUp()
        http_server.LAUNCHES.clear()
        sglang_server_args.PARSED.clear()
        sglang_utils.KILLED.clear()
        plugins.LOADS.clear()

    def test_scheduler_entry_pickles_by_reference(self):
        entry = kjit_scheduler.run_scheduler_process
        data = pickle.dumps(entry)
        self.assertIn(b"kjit.sglang.scheduler", data)
        self.assertIs(pickle.loads(data), entry)

    def test_scheduler_entry_installs_then_runs_sglang(self):
        args = (server_args(), None, 0, 0, 0, 0, 0, 0, None, None)
        report = kjit_scheduler.run_scheduler_process(*args)
        self.assertEqual(kjit.sglang.installed(), {"verify": True, "defrag": True})
        self.assertEqual(sglang_scheduler.CALLS, [args])
        self.assertEqual(report, {"tp_rank": 0, "need_sort": True,
                                  "verify_output": kjit.OUTPUT_FILL, "triton_calls": 0})

    def test_main_parses_like_sglang_and_installs_in_spawned_schedulers(self):
        kjit_launch_server.main(ARGV)
        self.assertEqual(sglang_server_args.PARSED, [ARGV])
        self.assertEqual(len(plugins.LOADS), 1)
        self.assertEqual(sglang_utils.KILLED, [(os.getpid(), False)])
        launch = http_server.LAUNCHES[-1]
        self.assertIs(launch["run_scheduler_process_func"], kjit_scheduler.run_scheduler_process)
        self.assertEqual(launch["reports"], [{"tp_rank": 0, "need_sort": True,
                                              "verify_output": kjit.OUTPUT_FILL,
                                              "triton_calls": 0}])
        # Only the scheduler processes patch SGLang; the launching process stays as it was.
        self.assertEqual(kjit.sglang.installed(), {"verify": False, "defrag": False})

    def test_switches_reach_the_spawned_schedulers(self):
        os.environ["KJIT_SGLANG"] = "0"
        kjit_launch_server.main(ARGV)
        self.assertEqual(http_server.LAUNCHES[-1]["reports"],
                         [{"tp_rank": 0, "need_sort": False,
                           "verify_output": extend_attention.OUTPUT_FILL, "triton_calls": 1}])

    def test_bad_switch_stops_before_parsing(self):
        os.environ["KJIT_SGLANG_VERIFY"] = "2"
        with self.assertRaises(ValueError):
            kjit_launch_server.main(ARGV)
        self.assertEqual(sglang_server_args.PARSED, [])
        os.environ["KJIT_SGLANG_VERIFY"] = "1"
        os.environ["KJIT_SGLANG_FP8_NUMERICS"] = "bf16"
        with self.assertRaisesRegex(ValueError, "KJIT_SGLANG_FP8_NUMERICS"):
            kjit_launch_server.main(ARGV)
        self.assertEqual(sglang_server_args.PARSED, [])

    def test_other_launch_modes_are_refused(self):
        for flag in ("--grpc-mode", "--use-ray", "--encoder-only"):
            with self.subTest(flag=flag), self.assertRaisesRegex(SystemExit, flag):
                kjit_launch_server.main(ARGV + [flag])
        self.assertEqual(http_server.LAUNCHES, [])
        self.assertEqual(len(sglang_utils.KILLED), 3)

    def test_python_dash_m_entry_point(self):
        with tempfile.TemporaryDirectory() as tmp:
            report_path = os.path.join(tmp, "reports.json")
            env = dict(os.environ, SGLANG_STANDIN_REPORT=report_path,
                       PYTHONPATH=os.pathsep.join(STANDIN_PATHS))
            done = subprocess.run(
                [sys.executable, "-m", "kjit.sglang.launch_server", *ARGV, "--tp-size", "2"],
                env=env, cwd=tmp, capture_output=True, text=True, timeout=120)
            self.assertEqual(done.returncode, 0, done.stderr)
            with open(report_path) as reports:
                self.assertEqual(json.load(reports), [
                    {"tp_rank": rank, "need_sort": True, "verify_output": kjit.OUTPUT_FILL,
                     "triton_calls": 0} for rank in (0, 1)])


class ImportTest(unittest.TestCase):
    def test_import_pulls_in_no_sglang_torch_triton_or_numpy(self):
        code = ("import sys\n"
                "import kjit.sglang, kjit.sglang.launch_server, kjit.sglang.scheduler\n"
                "heavy = sorted(m for m in sys.modules\n"
                "               if m.split('.')[0] in ('sglang', 'torch', 'triton', 'numpy'))\n"
                "print(heavy)\n"
                "sys.exit(1 if heavy else 0)\n")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(STANDIN_PATHS))
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)


if __name__ == "__main__":
    unittest.main()
