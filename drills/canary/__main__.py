"""``firedrill-canary`` / ``python -m drills.canary``: parse, run one rank, log ``exit``, return the exit code."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence

from drills.canary.config import parse_config
from drills.canary.device import Device, DeviceState
from drills.canary.errors import CanaryError, PeerTimeout, Terminated, UsageError
from drills.canary.interrupts import Interrupts
from drills.canary.log import Event, EventLog
from drills.canary.train import ExitReason, Trainer

__all__ = ["main"]

EXIT_CODES = {ExitReason.COMPLETE: 0, ExitReason.SIGTERM: 143, ExitReason.PEER_TIMEOUT: 1, ExitReason.ERROR: 1}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        cfg = parse_config(sys.argv[1:] if argv is None else argv, os.environ)
    except UsageError as exc:
        print(f"{exc}\n(firedrill-canary train --help lists the options and variables)", file=sys.stderr)
        return 2
    interrupts = Interrupts()
    interrupts.install()
    log = EventLog(sys.stdout, cfg.rank, cfg.world_size, cfg.generation)
    device = Device(cfg.device_socket, clocks=cfg.device_clocks, gpus=cfg.gpus)
    trainer = Trainer(cfg, log, device, interrupts)
    code: int | None = None
    try:
        trainer.run()
        reason, message = ExitReason.COMPLETE, f"reached step {cfg.steps_total}"
    except Terminated:
        reason, message = ExitReason.SIGTERM, "SIGTERM"
    except PeerTimeout as exc:
        reason, message = ExitReason.PEER_TIMEOUT, str(exc)
    except CanaryError as exc:
        reason, message = ExitReason.ERROR, str(exc)
    except KeyboardInterrupt:
        reason, message, code = ExitReason.ERROR, "interrupted (SIGINT)", 130
    except Exception as exc:  # a bug: the traceback goes to stderr, the exit line still comes
        traceback.print_exc()
        reason, message = ExitReason.ERROR, f"{type(exc).__name__}: {exc}"
    code = EXIT_CODES[reason] if code is None else code
    trainer.close()
    device.send(DeviceState.IDLE)
    device.close()
    log.emit(Event.EXIT, code=code, reason=reason.value, step=trainer.last_step, message=message)
    interrupts.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
