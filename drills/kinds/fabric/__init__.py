"""The fabric drill: the GPUs and the bandwidth a customer paid for are there (docs/FABRIC.md).

Every GPU node advertises the GPUs its inventory states, and a collective across a gang gets, on every node, the
bandwidth the contract's floor asks, with no node far behind the others; the bandwidth is the workload's own
measurement (the training canary's timed frames, or the profile's nccl-tests run), never the platform's word.

- :mod:`drills.kinds.fabric.drill`: the drill, over :class:`drills.workloads.training.TrainingRun`.
- :mod:`drills.kinds.fabric.inventory`: each GPU node's inventory against its allocatable GPUs (pure).
- :mod:`drills.kinds.fabric.links`: each link's bandwidth from the canary's step lines, and the node to blame (pure).
- :mod:`drills.kinds.fabric.nccltests`: nccl-tests' output, parsed (pure).
- :mod:`drills.kinds.fabric.bandwidthtest`: the profile's bandwidth test, one pod per node, on a real cluster.
- :mod:`drills.kinds.fabric.steps`: its sentences.
"""
