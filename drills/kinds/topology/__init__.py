"""The topology drill: a gang that asks to stay inside one topology domain (a rack, an NVLink domain: the nodes
that share one value of a node label) is placed inside one, or waits whole, holding nothing; a placement that
crosses domains FAILs naming the domains and which pod went where (docs/TOPOLOGY.md).

- :mod:`drills.kinds.topology.domains`: where a gang runs, domain by domain, and each domain's room (pure).
- :mod:`drills.kinds.topology.asking`: whether a real cluster's scheduler is asked to keep a gang in one domain.
- :mod:`drills.kinds.topology.drill`: another job holding GPUs, the gang submitted, its pods watched and judged.
- :mod:`drills.kinds.topology.steps`: its sentences.
"""
