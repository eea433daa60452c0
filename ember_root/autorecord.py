"""``EMBER_TRACE=DIR python train.py``: record every Python process that uses JAX, children
included, with no change to the program and no wrapper command.

``ember record --install-hook`` writes ``ember_trace.pth`` into the site-packages of the
environment Ember is installed in (``--uninstall-hook`` removes it). Python runs the file's
one line at every start; it does nothing unless ``EMBER_TRACE`` is set, and then calls
``install()``, which only puts a finder on ``sys.meta_path``: nothing of Ember or JAX is
imported. When the process imports ``jax`` (and only then), the recording starts, right
after JAX is loaded and before the program's own code goes on: a ``ProfileSession`` into
``DIR/<program>-<time>-<host>-<pid>-<random>.jsonl`` (one file per process, so a
``multiprocessing`` spawn child or a subprocess writes its own), memory readings every
0.1 s, and the top-level jitted calls as steps. It closes at exit (``atexit``), after an
uncaught exception too, and on SIGTERM, which becomes ``SystemExit(143)`` unless the program
set its own handler.

A process run by ``python -m ember.record`` (what ``ember record --`` runs) records itself
as it always did: it claims the process (``claim()``) before importing JAX. A child made
with ``fork`` (multiprocessing's default start method on Linux before Python 3.14) is not
recorded: it inherits the parent's recorder mid-flight; use ``spawn``, as JAX itself asks.
"""

from __future__ import annotations

import atexit
import importlib.abc
import os
import shlex
import signal
import sys
import sysconfig
from contextlib import ExitStack
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

__all__ = ["HOOK_FILE", "claim", "hook_path", "install", "install_hook", "uninstall_hook"]

TRACE_ENV = "EMBER_TRACE"
HOOK_FILE = "ember_trace.pth"
HOOK_LINE = (
    "import os; os.environ.get('EMBER_TRACE') and "
    "__import__('ember.autorecord').autorecord.install()\n"
)

_claimed = False
_stack: ExitStack | None = None


def claim() -> None:
    """This process records itself (``ember.record``): the hook stays out of it."""
    global _claimed
    _claimed = True


class _JaxFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``jax`` is about to be imported, wraps its loader so that
    the recording starts once the module has run."""

    def find_spec(self, name: str, path: Any = None, target: ModuleType | None = None) -> Any:
        if name != "jax":
            return None
        sys.meta_path.remove(self)
        spec = None
        for finder in list(sys.meta_path):  # the finders after this one, as Python would
            find = getattr(finder, "find_spec", None)
            if find is not None and (spec := find(name, path, target)) is not None:
                break
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_module = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run_module(module)
            _start()

        loader.exec_module = exec_module
        return spec


def install() -> None:
    """Start recording when this process imports JAX (the ``.pth`` line calls this)."""
    if os.environ.get(TRACE_ENV) and not any(isinstance(f, _JaxFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _JaxFinder())


def _program_name() -> str:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name not in ("__main__", None):
        return str(spec.name)
    argv0 = (sys.argv or [""])[0]
    return Path(argv0).stem if argv0 not in ("", "-c", "-") else "python"


def _start() -> None:
    global _stack
    if _claimed or _stack is not None:
        return
    try:
        _stack = _open_recording(Path(os.environ[TRACE_ENV]))
    except Exception as e:  # the program runs on, unrecorded, and says why once
        print(f"ember: EMBER_TRACE: not recording this process: {e}", file=sys.stderr)
        return
    atexit.register(_stop)
    _exit_on_sigterm()


def _open_recording(out: Path) -> ExitStack:
    from ember.record import Program, create_trace, git_commit
    from ember.recorder.jax import ProfileSession
    from ember.recorder.jax_steps import jit_steps
    from ember.runtime.memory import MemorySampler

    command = shlex.join(getattr(sys, "orig_argv", sys.argv))
    path = create_trace(out, Program(_program_name()))
    tags = {"command": command, "recorded_by": TRACE_ENV}
    if (commit := git_commit()) is not None:
        tags["git_commit"] = commit
    stack = ExitStack()
    try:
        stack.enter_context(ProfileSession(path, entrypoint=command, sync=False, tags=tags))
        stack.enter_context(MemorySampler(0.1))
        stack.enter_context(jit_steps())
    except BaseException:
        stack.close()
        raise
    return stack


def _stop() -> None:
    global _stack
    stack, _stack = _stack, None
    if stack is not None:
        stack.close()


def _exit_on_sigterm() -> None:
    """SIGTERM ends the process through ``SystemExit`` (so ``atexit`` closes the trace),
    unless the program handles SIGTERM itself."""

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    try:
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread
        pass


# ---------------------------------------------------------------- the .pth file


def hook_path() -> Path:
    """Where the hook goes: this environment's site-packages."""
    return Path(sysconfig.get_paths()["purelib"]) / HOOK_FILE


def install_hook() -> Path:
    """Write the ``.pth`` hook; returns its path."""
    path = hook_path()
    path.write_text(HOOK_LINE)
    return path


def uninstall_hook() -> Path | None:
    """Remove the hook; its path, or None when it was not there."""
    path = hook_path()
    if not path.exists():
        return None
    path.unlink()
    return path
