"""The Slurm target driver (issue 47): what the harness reads from and asks of a Slurm cluster, beside the
Kubernetes driver (:mod:`drills.kube`).

- :mod:`drills.slurm.state`: jobs and nodes as Slurm's commands report them (``squeue --json``, ``sinfo --json``),
  parsed into typed records (pure: unit-tested on Slurm's own output).
- :mod:`drills.slurm.driver`: the commands themselves (``sbatch``, ``squeue``, ``sinfo``, ``scancel``), run against
  the cluster a ``SLURM_CONF`` names; every failure a :class:`~drills.slurm.state.SlurmError` naming the command.
- :mod:`drills.slurm.rest`: slurmrestd's REST API, the read path where a site serves it (``slurm.rest``).

Slurm 22.05 (the oldest release real sites still run) and later: the commands' ``--json`` output is the read path
by default, slurmrestd's (the same documents, at the API version the profile names) where the profile asks.
"""
