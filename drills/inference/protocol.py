"""The OpenAI completions API as the canary speaks it: the request it accepts, the bodies and events it sends.

Pure: bytes in, dicts and bytes out.  The generated text is deterministic
(token ``i`` is ``" tok<i>"``), so a client can check it got every token in
order.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from drills.inference.errors import BadRequest

__all__ = ["DONE", "MAX_REQUEST_ID", "CompletionRequest", "ErrorKind", "completion", "error_body", "event",
           "parse_completion", "prompt_tokens", "stream_chunk", "token_text"]

DONE = b"data: [DONE]\n\n"
"""The Server-Sent Event that ends a stream."""
MAX_REQUEST_ID = 200
"""The longest ``X-Request-Id`` accepted (characters)."""


class ErrorKind(enum.Enum):
    """The ``type`` of an error body (OpenAI's names)."""

    INVALID_REQUEST = "invalid_request_error"
    """400 or 404: the request itself is wrong."""
    RATE_LIMIT = "rate_limit_error"
    """429: the queue is full; try again later."""
    UNAVAILABLE = "service_unavailable"
    """503: warming up or draining; try another replica."""


@dataclass(frozen=True)
class CompletionRequest:
    """A checked ``POST /v1/completions`` body."""

    model: str | None
    prompt: str
    max_tokens: int
    stream: bool


def parse_completion(body: bytes, max_tokens_limit: int) -> CompletionRequest:
    """The request in ``body``; raises :class:`BadRequest` naming the field that is wrong."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest(f"the body must be a JSON object, got {type(data).__name__}")
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest(f"'model' must be a string, got {json.dumps(model)}")
    if "prompt" not in data:
        raise BadRequest("'prompt' is required")
    prompt = data["prompt"]
    if not isinstance(prompt, str):
        raise BadRequest(f"'prompt' must be a string, got {type(prompt).__name__}")
    max_tokens = data.get("max_tokens", 16)
    if max_tokens is None:
        max_tokens = 16
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= max_tokens_limit:
        raise BadRequest(f"'max_tokens' must be an integer in 1..{max_tokens_limit}, got {json.dumps(max_tokens)}")
    stream = data.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise BadRequest(f"'stream' must be true or false, got {json.dumps(stream)}")
    return CompletionRequest(model=model, prompt=prompt, max_tokens=max_tokens, stream=stream)


def token_text(index: int) -> str:
    """The text of output token ``index`` (0-based)."""
    return f" tok{index}"


def prompt_tokens(prompt: str) -> int:
    """The prompt's length in tokens, counted as whitespace-separated words."""
    return len(prompt.split())


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def event(obj: Any) -> bytes:
    """One Server-Sent Event carrying ``obj`` as JSON."""
    return b"data: " + _dumps(obj) + b"\n\n"


def stream_chunk(request_id: str, model: str, created: int, index: int, last: bool) -> dict[str, Any]:
    """The chunk that carries token ``index`` of a stream (``finish_reason`` "length" on the last)."""
    return {"id": f"cmpl-{request_id}", "object": "text_completion", "created": created, "model": model,
            "choices": [{"text": token_text(index), "index": 0, "logprobs": None,
                         "finish_reason": "length" if last else None}]}


def completion(request_id: str, model: str, created: int, prompt: str, tokens: int) -> dict[str, Any]:
    """The whole answer of a request with ``stream: false``."""
    used = prompt_tokens(prompt)
    return {"id": f"cmpl-{request_id}", "object": "text_completion", "created": created, "model": model,
            "choices": [{"text": "".join(token_text(i) for i in range(tokens)), "index": 0, "logprobs": None,
                         "finish_reason": "length"}],
            "usage": {"prompt_tokens": used, "completion_tokens": tokens, "total_tokens": used + tokens}}


def error_body(message: str, kind: ErrorKind, code: str) -> bytes:
    """An OpenAI-style error body: ``{"error": {"message", "type", "code"}}``."""
    return _dumps({"error": {"message": message, "type": kind.value, "code": code}})
