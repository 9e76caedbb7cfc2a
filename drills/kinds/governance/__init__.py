"""The governance drill (docs/GOVERNANCE.md): each control chain crossed on purpose by a tenant's own identity,
judged PASS only when its gate stopped the attempt AND the API server's audit log holds the record of it.

- :mod:`drills.kinds.governance.audit`: reading the audit log, and the record a request must have left;
- :mod:`drills.kinds.governance.chains`: the four chains, an attempt, and how attempts are judged (pure);
- :mod:`drills.kinds.governance.identities`: whose credentials, and which audit log (the profile, or the embedded
  platform's data directory);
- :mod:`drills.kinds.governance.drill`: the drill's steps.
"""

from drills.kinds.governance.audit import AuditLog, AuditRecord, RecordQuery, parse_line
from drills.kinds.governance.chains import Answer, Attempt, Chain, Gate, judge_attempt, judge_chain
from drills.kinds.governance.drill import GovernanceDrill

__all__ = ["Answer", "Attempt", "AuditLog", "AuditRecord", "Chain", "Gate", "GovernanceDrill", "RecordQuery",
           "judge_attempt", "judge_chain", "parse_line"]
