"""Whose signatures count: a contract pins its signers by keyid in the features folder (``signers.yaml``).

    # features/signers.yaml: the parties who sign this contract's runs (keyids from `firedrill keygen`)
    signers:
      - name: vendor
        keyid: 3f1c...e9   # 64 lowercase hex: SHA-256 of the public key's DER SubjectPublicKeyInfo
      - name: customer
        keyid: a07b...41

``firedrill run`` reads it before anything moves (a malformed file is refused, naming the entry) and records
the pins in the signed run record, so the archive itself says whose signatures the contract requires; the
report shows them.  ``firedrill verify --signer PUB ...`` then demands one key per pinned party and refuses a
key the contract does not name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from drills.records.evidence.errors import EvidenceError

__all__ = ["SIGNERS_FILE", "ContractError", "ContractSigner", "load_signers"]

SIGNERS_FILE = "signers.yaml"
_KEYID = re.compile(r"[0-9a-f]{64}")


class ContractError(EvidenceError):
    """A ``signers.yaml`` that cannot be read as the contract's signers."""


@dataclass(frozen=True)
class ContractSigner:
    name: str
    keyid: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "keyid": self.keyid}


def load_signers(features_dir: Path) -> tuple[ContractSigner, ...]:
    """The signers pinned in ``features_dir/signers.yaml``; none when there is no such file."""
    path = features_dir / SIGNERS_FILE
    if not path.is_file():
        return ()
    try:
        data: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ContractError(f"{path}: cannot read ({exc})") from None
    items = data.get("signers") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise ContractError(f"{path}: needs a non-empty list `signers:` of entries with a name and a keyid")
    out: list[ContractSigner] = []
    for i, item in enumerate(items):
        where = f"{path}: signers[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"].strip():
            raise ContractError(f"{where} needs a name (who signs: vendor, customer...)")
        keyid = item.get("keyid")
        if not isinstance(keyid, str) or not _KEYID.fullmatch(keyid):
            raise ContractError(f"{where} ({item['name']}): keyid must be 64 lowercase hex characters, as "
                                "`firedrill keygen` prints it")
        if any(s.keyid == keyid for s in out):
            raise ContractError(f"{where} ({item['name']}): keyid is already pinned for another signer")
        out.append(ContractSigner(item["name"].strip(), keyid))
    return tuple(out)
