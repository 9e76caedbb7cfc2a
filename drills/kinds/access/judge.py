"""Judging what the probe pods reported: pure functions of their reports (docs/ACCESS.md).

Each judgement answers with :class:`Judged`: the broken promises (each naming the pod, its node and the GPUs),
and what could not be established (why, and how to fix it), so that the drill FAILs only on what a pod's own
probe showed and is INCONCLUSIVE, never PASS, where the probe could not show it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from drills.workloads.accessprobe import AccessReport, device_number

__all__ = ["Judged", "ProbePod", "crossings", "devices", "exactly_own", "opened_beyond", "own_opened", "seen_beyond"]


@dataclass(frozen=True)
class ProbePod:
    """One probe pod of the scenario, as the harness knows it: what it asked for, and what it reported."""

    name: str
    node: str
    requested: int
    """GPUs it requested (0: none)."""
    reports: tuple[AccessReport, ...] = ()
    """Its ``access`` lines, in the order it wrote them."""
    label: str = ""
    """How findings name it (``job 12 (acc-...)`` on Slurm); "" for ``pod <name>``."""

    @property
    def called(self) -> str:
        return self.label or f"pod {self.name}"

    @property
    def first(self) -> AccessReport | None:
        return self.reports[0] if self.reports else None

    def since(self, instant: float) -> AccessReport | None:
        """Its first round begun at or after ``instant`` (the node's clock, as its own ``started``)."""
        return next((r for r in self.reports if r.started >= instant), None)


@dataclass
class Judged:
    """What one judgement found: promises broken (FAIL), and facts the probes could not establish."""

    broken: list[str] = field(default_factory=list)
    unsettled: list[str] = field(default_factory=list)
    count: int = 0
    """How many times the promise broke: pods that see other than their own GPUs (:func:`exactly_own`), GPUs a
    pod opened that another holds (:func:`crossings`)."""


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def devices(report: AccessReport, names: Iterable[str]) -> str:
    """``nvidia0 (GPU-...), nvidia3``: device nodes with the identity the probe read for each, where it could."""
    out = []
    for name in names:
        ident = report.identity(name)
        out.append(f"{name} ({ident})" if ident else name)
    return ", ".join(out) or "none"


def _asked(pod: ProbePod) -> str:
    return "requested no GPU" if pod.requested == 0 else f"requested {_plural(pod.requested, 'GPU')}"


def _told(report: AccessReport) -> str:
    return f"{report.told_by} unset" if report.visible is None else f"{report.told_by}={report.visible}"


def _witnesses(report: AccessReport) -> str:
    """How many GPUs each witness counted, for a finding."""
    if report.shared_dev:  # every job of the node has every device node: only an open tells
        found = f"{_plural(len(report.seen), 'GPU')} whose open passed the device cgroup"
    else:
        found = _plural(len(report.seen), "device node")
    parts = [f"{found} ({devices(report, report.seen)})"]
    if report.nvml_count is not None:
        parts.append(f"NVML counts {report.nvml_count}")
    return "; ".join(parts)


def seen_beyond(pods: Sequence[ProbePod], limit: int) -> Judged:
    """Each pod sees at most ``limit`` GPUs (in any of its rounds): device nodes in its ``/dev``, devices it
    opened, or NVML's count, whichever is more."""
    out = Judged()
    for pod in pods:
        if not pod.reports:
            out.unsettled.append(f"{pod.called} on node {pod.node} wrote no access report")
            continue
        worst = max(pod.reports, key=lambda r: r.seen_count)
        if worst.seen_count > limit:
            out.broken.append(f"{pod.called} on node {pod.node} {_asked(pod)} but sees "
                              f"{_plural(worst.seen_count, 'GPU')}: {_witnesses(worst)}; {_told(worst)}")
    return out


def opened_beyond(pods: Sequence[ProbePod], limit: int) -> Judged:
    """Each pod opens at most ``limit`` of its node's GPUs (a real ``open()`` of the device node succeeded)."""
    out = Judged()
    for pod in pods:
        if not pod.reports:
            out.unsettled.append(f"{pod.called} on node {pod.node} wrote no access report")
            continue
        opened = sorted({d for r in pod.reports for d in r.opened}, key=lambda n: (device_number(n) or 0, n))
        if len(opened) > limit:
            last = pod.reports[-1]
            made = [d for d in opened if (a := last.attempt(d)) is not None and a.made == "opened"]
            how = f" ({', '.join(made)} through a device node it made itself: the device cgroup let it)" if made else ""
            out.broken.append(f"{pod.called} on node {pod.node} {_asked(pod)} but opened "
                              f"{_plural(len(opened), 'GPU')}: {devices(last, opened)}{how}")
    return out


def _identities(report: AccessReport) -> tuple[set[str], list[str]]:
    """(identities of every GPU it sees, device nodes whose identity it could not read)."""
    known = {i for d in report.seen if (i := report.identity(d))}
    known |= set(report.nvml_uuids)
    unknown = [d for d in report.seen if not report.identity(d)]
    return known, ([] if report.nvml_uuids else unknown)


def exactly_own(pods: Sequence[ProbePod]) -> Judged:
    """Each pod that requested GPUs sees exactly as many as it requested, and they are the ones it was told it
    holds (``NVIDIA_VISIBLE_DEVICES``, by UUID; by number where the variable names indexes)."""
    out = Judged()
    for pod in pods:
        report = pod.reports[-1] if pod.reports else None
        where = f"{pod.called} on node {pod.node}"
        if report is None:
            out.unsettled.append(f"{where} wrote no access report")
            continue
        if report.seen_count != pod.requested:
            out.count += 1
            out.broken.append(f"{where} {_asked(pod)} but sees {_plural(report.seen_count, 'GPU')}: "
                              f"{_witnesses(report)}; {_told(report)}")
            continue
        named = report.named
        if pod.requested and named is None:
            out.unsettled.append(f"{where} was told no device of its own ({_told(report)}), so which GPUs are its own "
                                 "cannot be read: a device plugin that passes devices another way (CDI) leaves the "
                                 "variable unset; the count was judged")
            continue
        if not pod.requested:
            continue
        if all(n.isdigit() for n in named):  # the device plugin's index strategy: compare device numbers
            mine = {f"nvidia{n}" for n in named}
            foreign, missing = sorted(set(report.seen) - mine), sorted(mine - set(report.seen))
        else:
            known, unknown = _identities(report)
            if unknown:
                out.unsettled.append(f"{where} could not read which GPU {', '.join(unknown)} is (NVML is not in its "
                                     "container: the image needs nothing but python3, but the node's container "
                                     "toolkit must mount libnvidia-ml.so.1, driver capability utility, which the "
                                     "probe pods ask for); the count was judged")
                continue
            foreign, missing = sorted(known - set(named)), sorted(set(named) - known)
        if foreign or missing:
            out.count += 1
            parts = ([f"sees {', '.join(foreign)}, which it was not given"] if foreign else []) + \
                    ([f"cannot see {', '.join(missing)}, which it was given"] if missing else [])
            out.broken.append(f"{where} {_asked(pod)} and was given {', '.join(named)} but "
                              f"{' and '.join(parts)} (device nodes: {devices(report, report.seen)})")
    return out


def own_opened(report: AccessReport) -> tuple[str, ...]:
    """The devices a pod holds as its own: those it opened that it was told are its own (by UUID, or by number
    where ``NVIDIA_VISIBLE_DEVICES`` names indexes); every device it opened where it cannot tell."""
    named = report.named
    if named is None:
        return report.opened
    if all(n.isdigit() for n in named):
        return tuple(d for d in report.opened if str(device_number(d)) in named)
    if any(not report.identity(d) for d in report.opened):
        return report.opened
    return tuple(d for d in report.opened if report.identity(d) in named)


def crossings(pods: Sequence[ProbePod]) -> Judged:
    """No pod opens a GPU another pod of the same node holds (:func:`own_opened`): for each pair, the first round
    one pod began after the other reported holding its GPUs (both on one node, so one clock) must have opened none
    of them; every device the other holds must have been tried."""
    out = Judged()
    for holder in pods:
        first = holder.first
        if first is None:
            out.unsettled.append(f"{holder.called} on node {holder.node} wrote no access report")
            continue
        held = own_opened(first)
        if holder.requested and not held:
            out.unsettled.append(f"{holder.called} on node {holder.node} holds no GPU (it could open none of its "
                                 "own), so no other pod's reach to it can be shown")
            continue
        for other in pods:
            if other is holder or other.node != holder.node:
                continue
            report = other.since(first.ts)
            if report is None:
                out.unsettled.append(f"{other.called} made no attempt after {holder.called} held its GPUs")
                continue
            untried = [d for d in held if d not in report.tried]
            reached = [d for d in held if (a := report.attempt(d)) is not None and a.opened]
            if untried:
                out.unsettled.append(f"{other.called} never tried {', '.join(untried)}, which {holder.called} "
                                     "holds (it tries the node's GPUs by its capacity)")
            if reached:
                out.count += len(reached)
                given = ", ".join(report.named or ()) or "nothing"
                out.broken.append(f"{other.called} on node {other.node} opened {devices(first, reached)}, which "
                                  f"{holder.called} holds ({other.called} was given {given}; {holder.called} was "
                                  f"given {', '.join(first.named or ()) or 'nothing'})")
    return out
