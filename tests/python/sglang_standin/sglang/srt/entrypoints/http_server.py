"""launch_server starts one scheduler process per TP rank with the spawn method, as SGLang's
does, then collects their reports (SGLANG_STANDIN_REPORT names a JSON file to write them to)."""
import json
import multiprocessing as mp
import os

from sglang.srt.managers.scheduler import run_scheduler_process

LAUNCHES = []


def launch_server(server_args, init_tokenizer_manager_func=None,
                  run_scheduler_process_func=run_scheduler_process,
                  run_detokenizer_process_func=None, execute_warmup_func=None,
                  launch_callback=None):
    ctx = mp.get_context("spawn")
    started = []
    for tp_rank in range(server_args.tp_size):
        reader, writer = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=run_scheduler_process_func,
                           args=(server_args, None, tp_rank, tp_rank, 0, 0, 0, 0, None, writer))
        proc.start()
        writer.close()
        started.append((proc, reader))
    reports = []
    for proc, reader in started:
        try:
            reports.append(reader.recv() if reader.poll(60) else None)
        except EOFError:
            reports.append(None)
        proc.join(60)
    LAUNCHES.append({"run_scheduler_process_func": run_scheduler_process_func,
                     "reports": reports})
    path = os.environ.get("SGLANG_STANDIN_REPORT")
    if path:
        with open(path, "w") as out:
            json.dump(reports, out)
