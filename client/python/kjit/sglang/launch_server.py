"""``python -m kjit.sglang.launch_server <sglang server arguments>``: SGLang's HTTP server with
kjit.sglang installed in every scheduler process.

The arguments are parsed by SGLang's own ``prepare_server_args``, exactly as
``python -m sglang.launch_server`` parses them; the only difference is the scheduler entry passed
to ``sglang.srt.entrypoints.http_server.launch_server``. The environment variables of
:mod:`kjit.sglang` are read here once (a bad value stops the launch before any worker starts) and
again in each scheduler process, which inherits them.

Nothing runs at import: with spawn, SGLang's children re-import this module as ``__mp_main__``.
"""
import logging
import os
import sys

logger = logging.getLogger("kjit.sglang")

# ServerArgs fields of the launch modes whose workers this entry cannot reach.
_OTHER_MODES = (("encoder_only", "--encoder-only"), ("grpc_mode", "--grpc-mode"),
                ("use_ray", "--use-ray"))


def run_server(server_args):
    """sglang.launch_server.run_server for the HTTP mode, with kjit's scheduler entry."""
    other = [flag for field, flag in _OTHER_MODES if getattr(server_args, field, False)]
    if other:
        raise SystemExit(f"kjit.sglang.launch_server runs SGLang's HTTP server only; "
                         f"{', '.join(other)} would start workers without kjit")
    from sglang.srt.entrypoints.http_server import launch_server

    from kjit.sglang.scheduler import run_scheduler_process

    launch_server(server_args, run_scheduler_process_func=run_scheduler_process)


def main(argv=None):
    from kjit.sglang.patch import resolve_fp8_numerics, resolve_switches

    switches = resolve_switches()
    fp8_numerics = resolve_fp8_numerics()
    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree
    from sglang.srt.utils.common import suppress_noisy_warnings

    suppress_noisy_warnings()
    load_plugins()
    server_args = prepare_server_args(sys.argv[1:] if argv is None else list(argv))
    logger.info("kjit.sglang: verify routing %s (fp8 KV cache numerics %s), KV defrag %s (applied in scheduler "
                "processes)", "on" if switches["verify"] else "off", fp8_numerics,
                "on" if switches["defrag"] else "off")
    try:
        run_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)


if __name__ == "__main__":
    main()
