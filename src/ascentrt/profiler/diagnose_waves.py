"""Diagnosis of kernels whose blocks leave a last partial wave: cores idle at each one's end."""

from __future__ import annotations

from collections import defaultdict

from ..units import format_ms
from .data import ProfileData
from .finding import MIN_TAIL_WAVE_SHARE, Finding, format_us, task_ref


def tail_waves(profile: ProfileData, whole: dict | None = None) -> list[Finding]:
    """Kernels (by device, name, block_dim and the units they held) whose block_dim is no
    multiple of the cores they ran on: the last wave of each run holds only its few blocks'
    cores, the kernel lasting a whole wave more for them (a simulated device records it).
    `whole`: see analysis.diagnose (a task cut to windows is counted once)."""
    groups: defaultdict[tuple, list] = defaultdict(list)
    for t in profile.tasks:
        if t.tail_ns and t.tail_units and t.kind == "kernel":
            groups[(t.device, t.name, t.block_dim, t.units)].append(t)
    run = max((t.end_ns for t in profile.tasks), default=0) or 1
    findings = []
    for (dev, name, blocks, units), runs in groups.items():
        tail = blocks % units
        waves = -(-blocks // units)
        # (at full use the idle cores' share of each last wave is time the kernel need not take)
        lost = int(sum(t.tail_ns * (units - tail) / units for t in runs))
        if lost < MIN_TAIL_WAVE_SHARE * run:
            continue
        count = len({id((whole or {}).get(id(t), t)) for t in runs})
        tail_ns = sum(t.tail_ns for t in runs)
        kernel_ns = sum(t.duration_ns for t in runs)
        shape = f"{blocks} blocks on {units} cores: {waves} waves, the {_ordinal(waves)} {tail}/{units} full"
        fewer = units * (waves - 1)
        findings.append(Finding(
            "tail_wave", f"Kernel {name} on device {dev} leaves its last wave mostly idle ({shape})",
            f"{shape}; in its {count} runs the last waves held {tail} of the {units} cores for "
            f"{format_ms(tail_ns)} ({format_us(tail_ns / len(runs))} each) while the other "
            f"{units - tail} had none of its blocks: at full use its work takes "
            f"{format_ms(kernel_ns - lost)}, not {format_ms(kernel_ns)}",
            f"make block_dim a multiple of the {units} cores ({units * waves} blocks, each doing "
            f"less) or at most {units}" + (f" (or {fewer}, each doing more)" if fewer > units else
                                           " (each block doing more)") +
            ": every wave is then full; failing that, give other streams kernels to run on the "
            "cores its last wave leaves free",
            {"block_dim": blocks, "cores it ran on": units, "waves": waves,
             "blocks in the last wave": tail, "runs": count, "time in last waves": format_ms(tail_ns),
             "kernel time": format_ms(kernel_ns), "lost to idle cores": format_ms(lost)},
            [task_ref(t) for t in runs[:5]], lost))
    return findings


def _ordinal(n: int) -> str:
    """2 -> '2nd', 11 -> '11th', 23 -> '23rd'."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
