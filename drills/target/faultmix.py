"""Fault mixes as data, and the seeded schedule a campaign draws from one (issue 27).

A mix is a versioned YAML file (``mixes/llama3-405b.yaml``, ``mixes/node-loss.yaml``, or a customer's own): each
fault kind with its weight and parameters, mapped onto the faults the drills inject::

    apiVersion: firedrill.dev/v1alpha1     optional; if present, exactly this
    kind: FaultMix                         optional; if present, exactly this
    name: llama3-405b                      required
    source: "..."                          optional: where the weights come from
    faults:                                required, at least one
      - kind: gpu-xid                      node-kill | node-hang | node-partition | gpu-xid | gpu-slow | rank-hang
        weight: 148                        a number above 0 (relative: the published count, a percentage, ...)
        xid: 79                            gpu-xid only, required: the Xid the GPU takes
        speed: 0.5                         gpu-slow only, required: the GPU's fraction of its speed, in (0, 1)
        from: "Faulty GPU (148)"           optional: which published row this is
    left_out: ["..."]                      optional: what the source lists that no platform can be drilled on

A malformed mix is a :class:`MixError` naming the file, the line and what to write instead.

:func:`schedule` is pure: faults arrive as a Poisson process (exponential gaps of the given mean) for the given
duration, each of a kind drawn by weight, from ``random.Random(seed)``; the same seed gives the same schedule.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from drills.errors import FiredrillError

__all__ = ["FaultKind", "MixError", "MixFault", "FaultMix", "ScheduledFault", "load_mix", "parse_mix", "schedule",
           "MIXES_DIR"]

MIXES_DIR = Path(__file__).resolve().parents[2] / "mixes"
"""The mixes shipped with the repository (a name in a sentence is looked up here)."""


class MixError(FiredrillError):
    """A fault mix that cannot be used; the message names the file, the line and the fix."""


class FaultKind(enum.Enum):
    """What a mix's fault does, mapped onto a drill's fault."""

    NODE_KILL = "node-kill"
    """The node's host crashes (the node pull drill's ``kill``)."""
    NODE_HANG = "node-hang"
    """The node's host hangs (``hang``)."""
    NODE_PARTITION = "node-partition"
    """The node is cut off from the control plane, its processes live on (``partition``)."""
    GPU_XID = "gpu-xid"
    """One GPU takes an Xid while its node lives (the GPU fault drill)."""
    GPU_SLOW = "gpu-slow"
    """One GPU runs at a fraction of its speed (the straggler drill)."""
    RANK_HANG = "rank-hang"
    """One rank stops inside a step and nothing crashes: a hung collective (the hang drill)."""


_PARAMS: dict[FaultKind, dict[str, str]] = {
    FaultKind.GPU_XID: {"xid": "a whole number of at least 1 (e.g. 79, 48)"},
    FaultKind.GPU_SLOW: {"speed": "a fraction of the GPU's speed above 0 and below 1 (e.g. 0.5)"},
}
_FAULT_KEYS = {"kind", "weight", "from", "xid", "speed"}
_TOP_KEYS = {"apiVersion", "kind", "name", "source", "faults", "left_out"}


@dataclass(frozen=True)
class MixFault:
    kind: FaultKind
    weight: float
    params: Mapping[str, float] = field(default_factory=dict)
    source_row: str = ""

    def describe(self) -> str:
        extra = ", ".join(f"{k} {v:g}" for k, v in self.params.items())
        return self.kind.value + (f" ({extra})" if extra else "")


@dataclass(frozen=True)
class FaultMix:
    name: str
    faults: tuple[MixFault, ...]
    source: str = ""
    left_out: tuple[str, ...] = ()
    path: str = ""

    def share(self, fault: MixFault) -> float:
        return fault.weight / sum(f.weight for f in self.faults)


@dataclass(frozen=True)
class ScheduledFault:
    index: int
    at: float
    """Seconds from the campaign's start."""
    fault: MixFault


def _where(path: str, node: yaml.Node | None) -> str:
    return f"{path}:{node.start_mark.line + 1}" if node is not None else path


def _mapping(node: yaml.Node) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    return {k.value: (k, v) for k, v in node.value} if isinstance(node, yaml.MappingNode) else {}


def _number(path: str, node: yaml.Node, what: str, fix: str) -> float:
    try:
        value = yaml.safe_load(yaml.serialize(node))
    except yaml.YAMLError:
        value = None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MixError(f"{_where(path, node)}: {what} is {node.value!r}, not a number; write {fix}")
    return float(value)


def parse_mix(text: str, path: str = "<mix>") -> FaultMix:
    """A mix from its YAML text; :class:`MixError` naming ``path`` and the line of the first problem."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise MixError(f"{path}{line}: not YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(root, yaml.MappingNode):
        raise MixError(f"{path}: a fault mix is a mapping with name and faults (see mixes/node-loss.yaml)")
    top = _mapping(root)
    for key, (knode, _) in top.items():
        if key not in _TOP_KEYS:
            raise MixError(f"{_where(path, knode)}: unknown field {key!r}; a mix has {', '.join(sorted(_TOP_KEYS))}")
    for key, want in (("apiVersion", "firedrill.dev/v1alpha1"), ("kind", "FaultMix")):
        if key in top and top[key][1].value != want:
            raise MixError(f"{_where(path, top[key][1])}: {key} is {top[key][1].value!r}; write {want}")
    if "name" not in top or not str(top["name"][1].value).strip():
        raise MixError(f"{path}: the mix has no name; add `name: my-mix`")
    if "faults" not in top or not isinstance(top["faults"][1], yaml.SequenceNode) or not top["faults"][1].value:
        where = _where(path, top["faults"][1]) if "faults" in top else path
        raise MixError(f"{where}: faults must be a list of at least one fault (kind, weight)")
    faults = tuple(_fault(path, item) for item in top["faults"][1].value)
    left = top.get("left_out")
    left_out = tuple(str(n.value) for n in left[1].value) if left and isinstance(left[1], yaml.SequenceNode) else ()
    return FaultMix(str(top["name"][1].value), faults, str(top["source"][1].value) if "source" in top else "",
                    left_out, path)


def _fault(path: str, node: yaml.Node) -> MixFault:
    fields = _mapping(node)
    if not fields:
        raise MixError(f"{_where(path, node)}: a fault is a mapping with kind and weight")
    for key, (knode, _) in fields.items():
        if key not in _FAULT_KEYS:
            raise MixError(f"{_where(path, knode)}: unknown field {key!r} in a fault; a fault has "
                           f"{', '.join(sorted(_FAULT_KEYS))}")
    if "kind" not in fields:
        raise MixError(f"{_where(path, node)}: the fault has no kind; write one of "
                       f"{', '.join(k.value for k in FaultKind)}")
    knode = fields["kind"][1]
    kind = next((k for k in FaultKind if k.value == knode.value), None)
    if kind is None:
        raise MixError(f"{_where(path, knode)}: unknown fault kind {knode.value!r}; write one of "
                       f"{', '.join(k.value for k in FaultKind)}")
    if "weight" not in fields:
        raise MixError(f"{_where(path, node)}: the {kind.value} fault has no weight; add `weight: 1`")
    weight = _number(path, fields["weight"][1], "weight", "a number above 0")
    if not weight > 0:
        raise MixError(f"{_where(path, fields['weight'][1])}: weight is {weight:g}; write a number above 0")
    params: dict[str, float] = {}
    wanted = _PARAMS.get(kind, {})
    for key in ("xid", "speed"):
        if key in fields and key not in wanted:
            raise MixError(f"{_where(path, fields[key][0])}: {key} belongs to "
                           f"{'gpu-xid' if key == 'xid' else 'gpu-slow'}, not {kind.value}")
    for key, fix in wanted.items():
        if key not in fields:
            raise MixError(f"{_where(path, node)}: the {kind.value} fault needs {key}: {fix}")
        value = _number(path, fields[key][1], key, fix)
        ok = (value >= 1 and value == int(value)) if key == "xid" else 0 < value < 1
        if not ok:
            raise MixError(f"{_where(path, fields[key][1])}: {key} is {value:g}; write {fix}")
        params[key] = value
    row = str(fields["from"][1].value) if "from" in fields else ""
    return MixFault(kind, weight, params, row)


def load_mix(name_or_path: str) -> FaultMix:
    """A shipped mix by name (``llama3-405b``), or a mix file by path."""
    candidate = Path(name_or_path)
    path = candidate if candidate.suffix in (".yaml", ".yml") or candidate.exists() else \
        MIXES_DIR / f"{name_or_path}.yaml"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        shipped = ", ".join(sorted(p.stem for p in MIXES_DIR.glob("*.yaml")))
        raise MixError(f"no fault mix {name_or_path!r}: {path} cannot be read; name a shipped mix ({shipped}) or "
                       "give the path of your own .yaml") from None
    return parse_mix(text, str(path))


def schedule(mix: FaultMix, seed: int, mean_interval: float, duration: float) -> list[ScheduledFault]:
    """The faults of a campaign: a Poisson process of mean gap ``mean_interval`` over ``duration`` seconds, each
    fault's kind drawn by weight; pure and reproducible from ``seed``."""
    if not mean_interval > 0 or not duration > 0:
        raise ValueError("a campaign needs a mean interval and a duration above 0")
    rng = random.Random(seed)
    weights: Sequence[float] = [f.weight for f in mix.faults]
    out: list[ScheduledFault] = []
    t = rng.expovariate(1.0 / mean_interval)
    while t < duration:
        out.append(ScheduledFault(len(out), round(t, 3), rng.choices(mix.faults, weights)[0]))
        t += rng.expovariate(1.0 / mean_interval)
    return out


def describe(faults: Sequence[ScheduledFault]) -> list[dict[str, Any]]:
    """The schedule as the evidence records it."""
    return [{"index": f.index, "at": f.at, "kind": f.fault.kind.value, **f.fault.params} for f in faults]
