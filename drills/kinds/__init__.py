"""The drill kinds: one package each, all alike (``drill.py``: the drill, registered with
:func:`drills.scenario.drill.register`; ``steps.py``: its sentences).  Kinds never import each other: what two
of them share lives in a layer below (:mod:`drills.scenario`, :mod:`drills.workloads`, :mod:`drills.target`).
:func:`drills.scenario.drill.discover` finds every package here; adding a kind edits nothing central
(docs/ARCHITECTURE.md, "Adding a drill kind")."""
