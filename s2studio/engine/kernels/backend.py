"""The one place that chooses the CPU GEMV for quantized weights, and says what it chose.

Per block type, a decode GEMV (a few activation rows) runs on one of these stacks:
- C integer dots (``intdot``, the ``_qdot`` extension, built by pip where a compiler exists):
  Q8_0 with int16 activations, K-quants with two int8 activation planes (``IntDot.PRECISE``,
  the default), or all of them with one int8 plane (``IntDot.INT8``: faster, ~1 % error);
- the numba float32 kernels (``quant_types``): block types the C kernels lack (Q4_0), or all
  of them with ``IntDot.OFF`` or where the extension is not built (the portable fallback);
- torch's float16 GEMV on a dequantized copy: where numba is missing, or where this machine
  runs the quantized kernels clearly slower (``choice``: measured once per machine, cached).

The choice follows ``KernelSettings`` (which integer path, how the C kernel's rows are
shared among threads, and its instruction-set level), a process-wide setting: the kernels
share one thread pool and compiled code. ``configure`` sets it (tests: ``configured`` for a
block); until then it is read once, at first use, from the environment variables that used to
select it at import: ``S2_INT_DOT`` (2 precise, 1 one int8 plane, 0 numba) and
``S2_GEMV_SCHEDULE`` (pool, dynamic, static), so A/B runs of a benchmark keep working,
``S2_KERNEL_LEVEL`` (best, or a level this CPU offers, e.g. avx2 or avxvnni), ``S2_PREFILL``
(int, exact: how a prefill's many rows are multiplied, ``PrefillPath``), and ``S2_ATTENTION``
(c, torch: the decode attention kernel, ``attention``), and ``S2_GLUE`` (c, torch: a layer's norms
and RoPE, ``glue``). ``describe`` is the line the loader logs
and ``s2studio --self-test`` prints.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Iterator, Mapping

from s2studio.engine.kernels import common as kcommon
from s2studio.engine.modes import AttentionKernel, GemvSchedule, GlueKernel, IntDot, KernelLevel, PrefillPath
from s2studio.errors import InputError

log = logging.getLogger(__name__)

INT_DOT_ENV = "S2_INT_DOT"
SCHEDULE_ENV = "S2_GEMV_SCHEDULE"
LEVEL_ENV = "S2_KERNEL_LEVEL"
PREFILL_ENV = "S2_PREFILL"
ATTENTION_ENV = "S2_ATTENTION"
GLUE_ENV = "S2_GLUE"


@dataclass(frozen=True)
class KernelSettings:
    """Which integer-dot activations the C kernels take (``IntDot``), and how their rows are
    shared among threads (``GemvSchedule``: pool, the default, the extension's own threads,
    which spin briefly between GEMVs instead of sleeping in OpenMP's region start and barrier
    (a frame in 0.81-0.92x dynamic's time quietly, 0.77-0.80x beside a competing process:
    docs/performance.md, "The GEMV's own threads"; where it is not built, dynamic); dynamic, tasks claimed on
    numba's OpenMP threads, so a thread the OS deschedules does not hold the GEMV up; static,
    equal shares, kept to measure the difference: docs/performance.md, "A busy machine"), and the C kernels' instruction set (``KernelLevel``: the best this CPU
    offers, or one forced; every level gives the outputs the tests bound, and avxvnni gives
    avx2's bit for bit), how a prefill's many rows are multiplied (``PrefillPath``: on the
    same integer kernels, or exactly), the decode attention (``AttentionKernel``: the C
    kernel of ``attention``, or torch's ops) and a layer's norms and RoPE (``GlueKernel``: the C
    calls of ``glue``, or torch's ops). Words are accepted and checked here, once;
    whether this CPU offers a forced level is checked where it is applied (``configure``)."""

    int_dot: IntDot = IntDot.PRECISE
    schedule: GemvSchedule = GemvSchedule.POOL
    level: KernelLevel = KernelLevel.BEST
    prefill: PrefillPath = PrefillPath.INT
    attention: AttentionKernel = AttentionKernel.C
    glue: GlueKernel = GlueKernel.C

    def __post_init__(self) -> None:
        object.__setattr__(self, "int_dot", IntDot.parse(self.int_dot))
        object.__setattr__(self, "schedule", GemvSchedule.parse(self.schedule))
        object.__setattr__(self, "level", KernelLevel.parse(self.level))
        object.__setattr__(self, "prefill", PrefillPath.parse(self.prefill))
        object.__setattr__(self, "attention", AttentionKernel.parse(self.attention))
        object.__setattr__(self, "glue", GlueKernel.parse(self.glue))

    @property
    def planes(self) -> int:
        """Activation planes for the C kernel: 1 int8 plane, or 2 (the int8 values and what
        they missed; Q8_0 takes int16 activations instead, as precise)."""
        return 1 if self.int_dot == IntDot.INT8 else 2

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> "KernelSettings":
        """The compatibility fallback: the old variables, where set. A value neither knows is
        warned about and the default used, as the old import-time reads did silently."""
        env = os.environ if environ is None else environ
        values = {}
        for field, var, mode in (("int_dot", INT_DOT_ENV, IntDot), ("schedule", SCHEDULE_ENV, GemvSchedule),
                                 ("level", LEVEL_ENV, KernelLevel), ("prefill", PREFILL_ENV, PrefillPath),
                                 ("attention", ATTENTION_ENV, AttentionKernel), ("glue", GLUE_ENV, GlueKernel)):
            word = env.get(var)
            if word is None or not word.strip():
                continue
            try:
                values[field] = mode.parse(word)
            except InputError as exc:
                log.warning("%s=%s ignored: %s", var, word, exc)
        return cls(**values)


_settings: KernelSettings | None = None  # None: not configured; the environment's, at first use


def configure(settings: KernelSettings | None = None) -> KernelSettings:
    """Use ``settings`` from now on (None: the environment's, ``KernelSettings.from_environment``).
    Matrices built with the engine's default follow it at their next GEMV. A forced level this
    CPU does not offer: ``InputError`` (the settings stay as they were); from the environment,
    a warning and the best level, as for the other variables' unknown words."""
    global _settings
    if settings is None:
        chosen = KernelSettings.from_environment()
        try:
            _apply_level(chosen.level)
        except InputError as exc:
            log.warning("%s=%s ignored: %s", LEVEL_ENV, chosen.level.value, exc)
            chosen = KernelSettings(chosen.int_dot, chosen.schedule, prefill=chosen.prefill,
                                    attention=chosen.attention, glue=chosen.glue)
            _apply_level(chosen.level)
    else:
        chosen = settings
        _apply_level(chosen.level)
    _settings = chosen
    return _settings


def _apply_level(level: KernelLevel) -> None:
    """Point the C kernels at ``level`` (process-wide, as the settings). The best level is the
    extension's own default, so the module (numba, llvmlite) is not imported just to say so."""
    if level == KernelLevel.BEST and _intdot_module is None:
        return
    intdot = _intdot()
    if not intdot.built():
        if level != KernelLevel.BEST:
            raise InputError(f"kernel level {level.value} cannot be used: the C integer kernels are not "
                             f"built ({intdot.import_error() or 'numba is missing'})")
        return
    offered = intdot.levels()
    if level == KernelLevel.BEST:
        intdot.set_level(intdot.best_level())
    elif level.value in offered:
        intdot.set_level(level.value)
    else:
        raise InputError(f"kernel level {level.value} is not available on this CPU "
                         f"(it offers {', '.join(offered)})")


def settings() -> KernelSettings:
    return _settings if _settings is not None else configure()


@contextmanager
def configured(new: KernelSettings) -> Iterator[KernelSettings]:
    """``new`` inside the block, the previous settings after it (tests, benchmarks)."""
    global _settings
    before = _settings
    configure(new)
    try:
        yield new
    finally:
        _apply_level(KernelLevel.BEST if before is None else before.level)
        _settings = before


class Kernel(str, Enum):
    """The stack one block type's decode GEMV runs on; the value is how ``describe`` says it."""

    C_INT16 = "C int16 dots"
    C_INT8_TWO_PLANES = "C int8 two-plane"
    C_INT8 = "C int8 one-plane"
    NUMBA_FLOAT32 = "numba float32"
    FLOAT16 = "dequantized float16"

    @property
    def is_int_dot(self) -> bool:
        return self in (Kernel.C_INT16, Kernel.C_INT8_TWO_PLANES, Kernel.C_INT8)


_intdot_module = None


def _intdot():
    # Imported on first use: intdot reads the settings from here. Kept, as every decode GEMV
    # asks (int_dot_ready) and an import statement per call would cost more than the check.
    global _intdot_module
    if _intdot_module is None:
        from s2studio.engine.kernels import intdot

        _intdot_module = intdot
    return _intdot_module


def int_dot_ready(type_name: str) -> bool:
    """Whether a GEMV on ``type_name`` blocks goes to the C integer kernel under the current
    settings: the extension is built, has this type, and the setting is not off."""
    intdot = _intdot()
    return settings().int_dot != IntDot.OFF and intdot.built() and type_name in intdot.TYPE_IDS


def int_prefill(type_name: str) -> bool:
    """Whether a prefill (more rows than one kernel call takes, up to
    ``qmatrix.int_prefill_max_rows``) on ``type_name`` blocks runs on the C integer kernels,
    16 rows a call: the setting says so and the decode GEMV goes there
    with precise activations (one int8 plane, ~1 % error, is kept for the decode steps: a prompt
    read that coarsely would move every frame after it)."""
    s = settings()
    return s.prefill == PrefillPath.INT and s.int_dot == IntDot.PRECISE and int_dot_ready(type_name)


def kernel_for(type_name: str, kept_quantized: bool = True) -> Kernel:
    """The stack a decode GEMV on ``type_name`` blocks runs on. ``kept_quantized`` False: the
    loader dequantized this type (numba missing, or slower here: ``choice``)."""
    if not kept_quantized or not kcommon.available():
        return Kernel.FLOAT16
    if not int_dot_ready(type_name):
        return Kernel.NUMBA_FLOAT32
    if settings().int_dot == IntDot.INT8:
        return Kernel.C_INT8
    return Kernel.C_INT16 if type_name == "Q8_0" else Kernel.C_INT8_TWO_PLANES


def int_dot_status() -> str:
    """Why the C integer kernels do or do not run: their instruction-set level and activation
    mode, or the reason for the numba float32 fallback."""
    intdot = _intdot()
    if intdot.import_error() is not None:
        return f"numba float32 (the C integer kernels are not built: {intdot.import_error()})"
    if not kcommon.available():
        return "none (numba is missing)"
    s = settings()
    if s.int_dot == IntDot.OFF:
        return "numba float32 (integer dots off)"
    acts = "1 int8 activation plane" if s.planes == 1 else "2 int8 activation planes, Q8_0 int16"
    return f"C integer dot products ({intdot.level()}, {acts})"


def describe(type_names: Iterable[str] | None = None, kept: Iterable[str] | None = None) -> str:
    """One line: each block type's GEMV stack, then the C kernels' instruction-set level and
    the thread schedule where they run, or why they do not, e.g.
    ``GEMV: Q4_K -> C int8 two-plane, Q8_0 -> C int16 dots; C level avx512vnni, schedule pool``.
    ``type_names``: the model's quantized types (None: every type the kernels know);
    ``kept``: those kept quantized (None: all; the others are dequantized to float16)."""
    from s2studio.engine.kernels.qmatrix import supported_types

    names = sorted(set(supported_types() if type_names is None else type_names))
    kept_set = set(names) if kept is None else set(kept)
    chosen = {name: kernel_for(name, name in kept_set) for name in names}
    parts = [f"{name} -> {kernel.value}" for name, kernel in chosen.items()]
    line = "GEMV: " + (", ".join(parts) if parts else "no quantized weights")
    if any(k.is_int_dot for k in chosen.values()):
        line += f"; C level {_intdot().level()}, schedule {_intdot().effective_schedule(settings().schedule).value}"
    elif any(k == Kernel.NUMBA_FLOAT32 and name in _intdot().TYPES for name, k in chosen.items()) \
            or not kcommon.available():
        line += f"; integer dots: {int_dot_status()}"
    return line


def keep_quantized(type_names: Iterable[str], measure: bool) -> frozenset[str]:
    """The block types to keep quantized on the CPU: all of them (``--dtype quantized``), or,
    with ``measure``, those this machine does not run clearly slower than float16 (``choice``,
    cached per machine and per kernel stack). None where numba is missing."""
    if not kcommon.available():
        return frozenset()
    if not measure:
        return frozenset(type_names)
    from s2studio.engine.kernels.choice import types_to_keep

    return types_to_keep(type_names)
