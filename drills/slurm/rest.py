"""slurmrestd's REST API as the harness's read path: the jobs and nodes slurmctld reports, over HTTP.

Where a site serves slurmrestd, the drills read through it instead of running ``squeue --json`` and ``sinfo --json``
for every poll (a process each, several a second during a node pull). Slurm 22.05's ``openapi/v0.0.38`` answers
``GET /slurm/v0.0.38/jobs`` and ``/nodes`` with the very documents its commands print, so
:func:`~drills.slurm.state.parse_jobs` and :func:`~drills.slurm.state.parse_nodes` read both. Later releases serve
later versions (``v0.0.39``...); the profile names the one its slurmrestd loads.

Authentication is a JSON Web Token (``rest_auth/jwt``): ``X-SLURM-USER-NAME`` and ``X-SLURM-USER-TOKEN`` on every
request, the token minted with ``scontrol token``. slurmrestd refuses tokens of root and of SlurmUser, so the
identity is an ordinary user that may read every job (no ``PrivateData=jobs``), best the one the harness submits
as. Acts (``sbatch``, ``scancel``) stay with the commands.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from drills.slurm.state import SlurmError

__all__ = ["API_VERSION", "TOKEN_ENV", "SlurmRest"]

API_VERSION = "v0.0.38"
"""The openapi plugin version Slurm 22.05 serves (``slurmrestd -s openapi/v0.0.38``)."""
API_PATTERN = re.compile(r"^v0\.0\.\d+$")
REQUEST_TIMEOUT_S = 30.0
TOKEN_ENV = "FIREDRILL_SLURM_JWT"
"""Where the token is by default: not ``SLURM_JWT``, which Slurm's own commands read (and then speak as the
token's user, whom sbatch refuses when it is not the user running it: "Invalid user id")."""


@dataclass
class SlurmRest:
    """One slurmrestd, e.g. ``http://slurm-head:6820``, read as ``user`` with ``token``."""

    url: str
    user: str
    token: str = field(repr=False)
    api: str = API_VERSION
    token_env: str = TOKEN_ENV
    """Where the token came from, for the error that says it was refused."""
    timeout: float = REQUEST_TIMEOUT_S
    _http: httpx.Client | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise SlurmError(f"slurm.rest.url {self.url!r} is not an http(s) URL: write it as http://HOST:6820, "
                             "where slurmrestd listens")
        if not API_PATTERN.match(self.api):
            raise SlurmError(f"slurm.rest.api {self.api!r} is not an openapi plugin version such as {API_VERSION}")
        self.url = self.url.rstrip("/")

    @property
    def http(self) -> httpx.Client:
        if self._http is None:
            self._http = httpx.Client(base_url=self.url, timeout=self.timeout, trust_env=False,
                                      headers={"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.token})
        return self._http

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def get(self, what: str) -> dict[str, Any]:
        """``GET /slurm/<api>/<what>`` (``jobs``, ``nodes``, ``ping``): its document, free of errors."""
        path = f"/slurm/{self.api}/{what}"
        where = f"GET {self.url}{path}"
        try:
            answer = self.http.get(path)
        except httpx.TimeoutException:
            raise SlurmError(f"{where}: no answer within {self.timeout:g} s: is slurmrestd up, and slurmctld "
                             "answering it?") from None
        except httpx.HTTPError as exc:
            raise SlurmError(f"{where}: {exc}: is slurmrestd listening there (slurmrestd HOST:PORT)?") from None
        if answer.status_code == 401:
            raise SlurmError(f"{where}: 401, the token in ${self.token_env} for user {self.user!r} was not accepted: "
                             f"mint a new one (scontrol token username={self.user} lifespan=SECONDS) and export it; "
                             "slurmrestd refuses root's and SlurmUser's tokens, and needs rest_auth/jwt and "
                             "AuthAltTypes=auth/jwt")
        if answer.status_code == 404:
            raise SlurmError(f"{where}: 404: this slurmrestd does not serve openapi/{self.api}; set slurm.rest.api to "
                             "a version it loads (slurmrestd -s list names them)")
        try:
            doc = answer.json()
        except ValueError:
            raise SlurmError(f"{where}: {answer.status_code}, an answer that is not JSON "
                             f"({answer.text.strip()[:120]!r})") from None
        if not isinstance(doc, dict):
            raise SlurmError(f"{where}: the answer is a {type(doc).__name__}, not an object")
        errors = [e for e in doc.get("errors") or [] if e]
        if errors or answer.status_code >= 400:
            # slurmrestd hands the token on: slurmctld's refusal of one that expired or is another user's comes back
            # as its failure to answer ("Failed while looking for jobs", "Unspecified error"), not as a 401
            said = "; ".join(_error(e) for e in errors) or answer.text.strip()[:300]
            raise SlurmError(f"{where}: {answer.status_code}, {said}, said through slurmrestd: the token in "
                             f"${self.token_env} may have expired or not be {self.user}'s (mint a new one: scontrol "
                             f"token username={self.user} lifespan=SECONDS), or slurmctld may not be answering")
        if what in ("jobs", "nodes") and not isinstance(doc.get(what), list):
            raise SlurmError(f"{where}: no '{what}' list in the answer: does slurmrestd serve openapi/{self.api} "
                             "the way Slurm 22.05 and later do?")
        return doc


def _error(entry: Any) -> str:
    """One entry of an answer's ``errors``: its description and what Slurm called the error."""
    if not isinstance(entry, Mapping):
        return str(entry)
    parts = [str(entry[k]) for k in ("description", "error") if entry.get(k)]
    return " (".join(parts) + ")" * (len(parts) - 1) if parts else str(entry)
