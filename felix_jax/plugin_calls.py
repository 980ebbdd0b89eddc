"""Where felix-jax calls a user's plugin: a selector's ``init`` / ``select``, an aggregator's
``weights`` / ``transform_deltas`` / ``augment_info`` / ``combine``, and the factories that make them and
models.

What such a call raises is the plugin author's to fix, so it reaches them as a
:class:`PluginError`: one line saying which plugin and which call (``selector 'greedy'.select``),
the innermost frame of their own code (``my_policies.py:14``) and the exception. A write to the
server's read-only arrays (``ctx.view``'s, ``ctx.eligible``) says which array it was and where a
policy keeps its own state instead. The original exception is the PluginError's ``__cause__``,
with its whole stack (``felix-jax run --traceback`` prints it).

Only what a plugin registered is wrapped (:func:`is_plugin`): felix-jax's own policies are
called as they are, and an error in them stays a felix-jax traceback.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import linecache
import os
import sys
import sysconfig
import traceback
from typing import Any, Callable

import numpy as np

# where a policy keeps what it needs between calls (docs/file-formats.md, "Plugins")
STATE_ADVICE = ("a selector keeps its own state in the value init() returns and select() passes back with its "
                "ids (to change an array, copy it: np.array(ctx.eligible))")


class PluginError(RuntimeError):
    """A user's plugin raised: ``what`` (``"selector 'x'.select"``), ``where`` (``"file:line"`` of the
    plugin's own innermost frame) and ``error`` (what it raised, also the ``__cause__``)."""

    def __init__(self, what: str, where: str, error: BaseException, detail: str | None = None):
        self.what, self.where, self.error, self.detail = what, where, error, detail
        # what a run it stopped kept (set by experiment/runner.py): the aggregations its results hold,
        # its stop snapshot, or why it has none
        self.stopped_after: int | None = None
        self.snapshot = None
        self.no_snapshot: str | None = None
        super().__init__(f"{what} failed at {where}: {detail or describe(error)}")

    def __reduce__(self):  # pickled whole (a sweep's Ray task sends it back)
        return type(self), (self.what, self.where, self.error, self.detail), self.__dict__


def describe(error: BaseException) -> str:
    """``Type: first line of the message`` (a ``sys.exit`` says so)."""
    if isinstance(error, SystemExit):
        return f"it called sys.exit({error.code!r}); a policy returns, it never ends the process"
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def is_plugin(factory: Callable) -> bool:
    """Whether ``factory`` comes from outside felix-jax (a plugin file or module, a test)."""
    module = getattr(factory, "__module__", None) or ""
    return module != "felix_jax" and not module.startswith("felix_jax.")


def guarded(what: str, fn: Callable) -> Callable:
    """``fn`` whose exceptions (and ``sys.exit``) become a :class:`PluginError` naming ``what``."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PluginError:
            raise
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a user's code: whatever it raises is theirs
            raise plugin_error(what, e, args) from e

    return call


def plugin_error(what: str, error: BaseException, args: tuple = ()) -> PluginError:
    """The :class:`PluginError` for ``error`` raised by the call ``what`` with ``args``."""
    frame, lineno, summary = _user_frame(error.__traceback__)
    where = location(error)
    detail = None
    if frame is not None and isinstance(error, ValueError) and ("read-only" in str(error)
                                                                or "WRITEABLE flag" in str(error)):
        detail = _read_only_detail(error, frame, summary, args)
    elif is_missing_rng(error):
        detail = f"{describe(error)}; {DROPOUT_ADVICE}"
    return PluginError(what, where, error, detail)


# a flax module that asks for a PRNG stream (dropout) when felix-jax gave it none
DROPOUT_ADVICE = ("a module with dropout takes its training switch as an argument and names it to "
                  "make_model: make_model(name, module, input_shape, num_classes, train_flag=\"train\") with "
                  "__call__(self, x, train: bool) and nn.Dropout(rate, deterministic=not train); evaluation then "
                  "runs with train=False and local training with train=True and a per-task key")


def is_missing_rng(error: BaseException) -> bool:
    """Whether ``error`` is flax's InvalidRngError (a module drew random numbers it was not given a key for)."""
    return any(t.__name__ == "InvalidRngError" for t in type(error).__mro__)


def defined_at(fn: Callable) -> str:
    """``" (defined at FILE:LINE)"`` for a plugin's function (unwrapped: the user's own ``def``), ``""``
    for felix-jax's own or where Python cannot say: a broken contract found after the call (ids out of
    range, bad weights) then points at the code to fix, as an exception inside it does."""
    target = inspect.unwrap(fn)
    code = getattr(target, "__code__", None)
    if code is None or not is_plugin(target):
        return ""
    return f" (defined at {code.co_filename}:{code.co_firstlineno})"


def check_signature(what: str, fn: Callable, args: tuple, expected: str) -> None:
    """Raises a :class:`PluginError` naming ``expected`` (``make(input_shape, num_classes) -> Model``) when
    a plugin's ``fn`` cannot be called with ``args``, before it is called (a call that cannot bind raises
    from no frame of the plugin's, so the error could not say where)."""
    target = inspect.unwrap(fn)
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # no signature to read (a builtin): the call itself will tell
        return
    try:
        signature.bind(*args)
    except TypeError as e:
        code = getattr(target, "__code__", None)
        where = (f"{code.co_filename}:{code.co_firstlineno}" if code is not None
                 else "an unknown place (no Python frame)")
        name = getattr(target, "__name__", "make")
        raise PluginError(what, where, e, f"it is defined as {name}{signature}, but felix-jax calls {expected}") \
            from None


# ------------------------------------------------------------------ the plugin's own frame
def location(error: BaseException) -> str:
    """``file:line`` of the plugin's own innermost frame in ``error``'s traceback, as caught at the
    boundary (see :func:`_user_frame`)."""
    frame, lineno, _ = _user_frame(error.__traceback__)
    return "an unknown place (no Python frame)" if frame is None else f"{frame.f_code.co_filename}:{lineno}"


def _own_roots() -> list[str]:
    """The folders of felix-jax's packages (``felix_jax``, and ``models`` / ``traces`` beside it)."""
    roots = []
    for name in ("felix_jax", "felix_jax.models", "felix_jax.traces"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            roots.append(os.path.dirname(os.path.abspath(module.__file__)) + os.sep)
    return roots


def _library_roots() -> list[str]:
    """The standard library's and installed packages' folders."""
    paths = sysconfig.get_paths()
    return [os.path.abspath(paths[k]) + os.sep for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths]


def _user_frame(tb):
    """(frame, line, FrameSummary) of the innermost frame of the plugin's own code in ``tb`` (the
    traceback as caught at the boundary): outside felix-jax, the standard library and installed
    packages; else (a plugin installed as a package) the innermost outside felix-jax; else the
    plugin's entry frame. ``(None, None, None)`` when the call raised from no Python frame."""
    entries = list(traceback.walk_tb(tb))[1:]  # the first is the boundary's own frame
    summaries = traceback.extract_tb(tb)[1:]
    if not entries:
        return None, None, None
    own, libraries = _own_roots(), _library_roots()

    def outside(frame, roots):
        name = os.path.abspath(frame.f_code.co_filename)
        return not frame.f_code.co_filename.startswith("<") and not any(name.startswith(r) for r in roots)

    for roots in (own + libraries, own):
        for (frame, lineno), summary in zip(reversed(entries), reversed(summaries)):
            if outside(frame, roots):
                return frame, lineno, summary
    frame, lineno = entries[0]
    return frame, lineno, summaries[0]


# ------------------------------------------------------------------ a write to a read-only array
def _read_only_detail(error: ValueError, frame, summary, args: tuple) -> str:
    """Which read-only array the plugin wrote to (named from the failing expression, aliases
    followed), that it is read-only to policies, and where a policy's state belongs."""
    ctx = next((a for a in args if hasattr(a, "eligible") and hasattr(a, "view")), None)
    arrays = {} if ctx is None else _context_arrays(ctx)
    name = _written_array(frame, summary, arrays)
    target = (f"{name}, which is read-only to policies" if name else
              "a read-only array" + (" (the server's view and ctx.eligible are read-only to policies)"
                                     if ctx is not None else ""))
    verb = "tried to make writeable" if "WRITEABLE flag" in str(error) else "wrote to"
    return (f"it {verb} {target} ({describe(error)}): the server keeps the view and ctx.eligible in step "
            f"with its bookkeeping; {STATE_ADVICE}")


def _context_arrays(ctx) -> dict[str, np.ndarray]:
    """The read-only arrays a selector is given, by the name it reaches them with."""
    arrays = {"ctx.eligible": ctx.eligible}
    view = ctx.view
    # the server's read-only view hands out its columns by name (ReadOnlyView.COLUMNS); a map's own fields
    names = getattr(type(view), "COLUMNS", None) or ([f.name for f in dataclasses.fields(view)]
                                                     if dataclasses.is_dataclass(view) else [])
    for name in names:
        value = getattr(view, name, None)
        if isinstance(value, np.ndarray) and not value.flags.writeable:
            arrays[f"ctx.view.{name}"] = value
    return {k: v for k, v in arrays.items() if isinstance(v, np.ndarray)}


def _written_array(frame, summary, arrays: dict[str, np.ndarray]) -> str | None:
    """The name in ``arrays`` of the read-only array that the failing expression in ``frame``
    touches (directly, or through a local name or slice of it); None if none can be told."""
    for tree in _failing_code(summary):
        for node in ast.walk(tree):
            value = _resolve(node, frame)
            if isinstance(value, np.ndarray) and not value.flags.writeable:
                for name, array in arrays.items():
                    if value is array or np.may_share_memory(value, array):
                        return name
    return None


def _failing_code(summary) -> list[ast.AST]:
    """The failing expression (the instruction's columns), then its whole line, parsed."""
    if summary is None or summary.lineno is None:
        return []
    lines = linecache.getlines(summary.filename)
    if not lines or summary.lineno > len(lines):
        return []
    line = lines[summary.lineno - 1]
    texts = []
    if summary.end_lineno == summary.lineno and summary.colno is not None and summary.end_colno is not None:
        texts.append(line.encode()[summary.colno:summary.end_colno].decode(errors="replace"))
    texts.append(line.strip())
    trees = []
    for text in texts:
        try:
            trees.append(ast.parse(text))
        except SyntaxError:
            continue
    return trees


def _resolve(node: ast.AST, frame) -> Any:
    """The value of a name or an attribute chain (``ctx.view.busy``) in ``frame``; None for anything
    else (nothing is called but plain attribute lookups)."""
    if isinstance(node, ast.Name):
        scope = frame.f_locals
        return scope[node.id] if node.id in scope else frame.f_globals.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, frame)
        if owner is None:
            return None
        try:
            return getattr(owner, node.attr, None)
        except Exception:  # noqa: BLE001 - a property of the user's that raises: no name from it
            return None
    return None
