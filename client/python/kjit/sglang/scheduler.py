"""SGLang's scheduler-process entry with kjit.sglang installed first.

SGLang starts one scheduler process per tensor/pipeline-parallel rank (and, with data
parallelism, from a controller process) with multiprocessing's spawn method, passing the entry
function as ``run_scheduler_process_func``. The model runner, the attention backends and the KV
allocators all live in that process, so that is where install() has to run, before SGLang builds
them. This function is module-level so that spawn pickles it by reference.
"""


def run_scheduler_process(*args, **kwargs):
    """Same arguments as sglang.srt.managers.scheduler.run_scheduler_process."""
    # SGLang's module first, as a spawned child of SGLang's own would import it: install() then
    # patches modules SGLang has already loaded in its usual order.
    from sglang.srt.managers.scheduler import run_scheduler_process as sglang_run_scheduler_process

    from kjit.sglang.patch import install

    install()
    return sglang_run_scheduler_process(*args, **kwargs)
