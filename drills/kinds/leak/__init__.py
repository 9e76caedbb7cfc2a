"""The leak identification drill: inject a known hole, ask the platform's leak report, judge its answer.

- :mod:`drills.target.leakreport.model`: the four holes, the leak report as the harness reads it (docs/LEAK_REPORT.md).
- :mod:`drills.kinds.leak.truth`: ground truth from what the drill injected and the instants it observed (pure).
- :mod:`drills.kinds.leak.judge`: named hole and size against the truth (pure).
- :mod:`drills.target.leakreport.source`: where the leak report is read (API server path, a configured URL).
- :mod:`drills.kinds.leak.drill`: the injections on a live target and their rollback.
"""

from drills.target.leakreport.model import Hole, LeakError, LeakReading, ReportUnavailable

__all__ = ["Hole", "LeakError", "LeakReading", "ReportUnavailable"]
