"""install() and uninstall(): the switches, and the record of every SGLang attribute replaced.

Each part (verify, defrag) names its targets as (module, class, attribute, required) and a
wrapper factory. A replaced attribute carries the original under ``_MARK``, so that a wrapper is
never wrapped again.
"""
import importlib
import logging
import os
import threading

from kjit.sglang import defrag as _defrag
from kjit.sglang import verify as _verify

logger = logging.getLogger("kjit.sglang")

_MARK = "_kjit_sglang_original"
_MISSING = object()
_TRUE = frozenset(("1", "true", "yes", "on"))
_FALSE = frozenset(("0", "false", "no", "off"))

PARTS = ("verify", "defrag")
_PART_MODULES = {"verify": _verify, "defrag": _defrag}  # each has TARGETS and wrap()
_ENV = {"verify": "KJIT_SGLANG_VERIFY", "defrag": "KJIT_SGLANG_DEFRAG"}
FP8_NUMERICS_ENV = "KJIT_SGLANG_FP8_NUMERICS"

_lock = threading.Lock()
_applied = {part: [] for part in PARTS}  # part -> [_Replacement], in the order applied


def env_switch(name, default=True):
    """The boolean value of environment variable `name`; `default` when unset or empty."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    value = raw.lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name}={raw!r}: expected 1 or 0 (true/false, yes/no, on/off)")


def resolve_fp8_numerics(fp8_numerics=None):
    """How verify computes with an fp8 KV cache: the argument, else $KJIT_SGLANG_FP8_NUMERICS, else
    "dequant". ValueError for anything but "dequant" or "fp8"."""
    choices = _verify.FP8_NUMERICS
    if fp8_numerics is not None:
        if fp8_numerics not in choices:
            raise ValueError(f"fp8_numerics={fp8_numerics!r}: expected one of {', '.join(choices)}")
        return fp8_numerics
    raw = os.environ.get(FP8_NUMERICS_ENV, "").strip()
    if not raw:
        return choices[0]
    if raw.lower() not in choices:
        raise ValueError(f"{FP8_NUMERICS_ENV}={raw!r}: expected {' or '.join(choices)} (how kjit computes "
                         f"with an fp8 KV cache; default {choices[0]})")
    return raw.lower()


def resolve_switches(verify=None, defrag=None):
    """Which parts install() would apply: explicit arguments win over the environment."""
    everything = env_switch("KJIT_SGLANG")
    wanted = {}
    for part, arg in (("verify", verify), ("defrag", defrag)):
        wanted[part] = bool(arg) if arg is not None else everything and env_switch(_ENV[part])
    return wanted


class _Replacement:
    __slots__ = ("owner", "name", "previous", "wrapper")

    def __init__(self, owner, name, previous, wrapper):
        self.owner, self.name, self.previous, self.wrapper = owner, name, previous, wrapper

    def restore(self):
        if self.owner.__dict__.get(self.name) is not self.wrapper:
            logger.warning("%s.%s was replaced again after kjit.sglang; left as it is",
                           self.owner.__qualname__, self.name)
        elif self.previous is _MISSING:
            delattr(self.owner, self.name)  # it was inherited: fall back to the base's again
        else:
            setattr(self.owner, self.name, self.previous)


def _replace(owner, name, make_wrapper):
    """Wraps owner.name; None when it already is kjit.sglang's wrapper."""
    previous = owner.__dict__.get(name, _MISSING)
    if getattr(previous, _MARK, None) is not None:
        return None
    original = getattr(owner, name) if previous is _MISSING else previous
    wrapper = make_wrapper(original)
    setattr(wrapper, _MARK, original)
    setattr(owner, name, wrapper)
    return _Replacement(owner, name, previous, wrapper)


def _apply(part, targets, make_wrapper):
    """Wraps every target, skipping optional ones SGLang lacks; on an error, none."""
    done = []
    try:
        for module_name, class_name, attr, required in targets:
            try:
                owner = getattr(importlib.import_module(module_name), class_name)
                getattr(owner, attr)
            except (ImportError, AttributeError) as error:
                if not required:
                    logger.debug("kjit.sglang %s: %s.%s not patched (%s)",
                                 part, module_name, class_name, error)
                    continue
                raise RuntimeError(
                    f"kjit.sglang {part}: cannot patch {module_name}.{class_name}.{attr} "
                    f"({error}); set {_ENV[part]}=0 to run without it") from error
            replacement = _replace(owner, attr, make_wrapper)
            if replacement is not None:
                done.append(replacement)
    except BaseException:
        for replacement in reversed(done):
            replacement.restore()
        raise
    return done


def install(verify=None, defrag=None, fp8_numerics=None):
    """Applies the parts that are switched on and not yet applied; returns installed().

    Arguments override the environment (see the package docstring). A part already applied is
    left as it is, so calling install() again is harmless; parts switched off are not removed
    (uninstall() does that). fp8_numerics ("dequant" or "fp8") is how the verify part has kjit
    compute with an fp8 KV cache; each call sets it. Raises RuntimeError when a required SGLang
    attribute is missing, ValueError for a bad switch or fp8_numerics (then nothing changes).
    """
    wanted = resolve_switches(verify, defrag)
    numerics = resolve_fp8_numerics(fp8_numerics)
    with _lock:
        _verify.set_fp8_numerics(numerics)
        for part in PARTS:
            if wanted[part] and not _applied[part]:
                module = _PART_MODULES[part]
                _applied[part] = _apply(part, module.TARGETS, module.wrap)
        return {part: bool(_applied[part]) for part in PARTS}


def installed():
    """{"verify": bool, "defrag": bool}: which parts this process has applied."""
    with _lock:
        return {part: bool(_applied[part]) for part in PARTS}


def uninstall():
    """Puts back every attribute install() replaced and forgets the fallback log."""
    with _lock:
        for part in reversed(PARTS):
            for replacement in reversed(_applied[part]):
                replacement.restore()
            _applied[part] = []
        _verify.reset()
