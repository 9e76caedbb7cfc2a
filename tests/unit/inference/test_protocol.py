"""The completions API: what a request may say, and the shapes of chunks, answers and errors."""

from __future__ import annotations

import json

import pytest

from drills.inference.errors import BadRequest
from drills.inference.protocol import (DONE, CompletionRequest, ErrorKind, completion, error_body, event,
                                       parse_completion, stream_chunk)


def test_a_request_with_defaults() -> None:
    assert parse_completion(b'{"model":"m","prompt":"hi"}', 100) == CompletionRequest("m", "hi", 16, False)
    assert parse_completion(b'{"prompt":"","max_tokens":3,"stream":true,"temperature":0}', 100) == \
        CompletionRequest(None, "", 3, True)


@pytest.mark.parametrize(("body", "named"), [
    (b"{", "not JSON"),
    (b"\xff", "not JSON"),
    (b"[1]", "JSON object"),
    (b'{"model":"m"}', "'prompt' is required"),
    (b'{"prompt":["a"]}', "'prompt' must be a string"),
    (b'{"prompt":"a","model":7}', "'model' must be a string"),
    (b'{"prompt":"a","max_tokens":0}', "'max_tokens' must be an integer in 1..100, got 0"),
    (b'{"prompt":"a","max_tokens":101}', "got 101"),
    (b'{"prompt":"a","max_tokens":true}', "got true"),
    (b'{"prompt":"a","max_tokens":2.5}', "got 2.5"),
    (b'{"prompt":"a","stream":"yes"}', "'stream' must be true or false"),
])
def test_a_bad_request_names_the_field(body: bytes, named: str) -> None:
    with pytest.raises(BadRequest, match=named.replace("[", r"\[").replace(".", r"\.")):
        parse_completion(body, 100)


def test_stream_chunks_are_openai_completion_chunks_and_the_last_says_length() -> None:
    first = stream_chunk("r1", "m", 1700000000, 0, last=False)
    last = stream_chunk("r1", "m", 1700000000, 2, last=True)
    assert first == {"id": "cmpl-r1", "object": "text_completion", "created": 1700000000, "model": "m",
                     "choices": [{"text": " tok0", "index": 0, "logprobs": None, "finish_reason": None}]}
    assert last["choices"][0]["finish_reason"] == "length" and last["choices"][0]["text"] == " tok2"
    sse = event(first)
    assert sse.startswith(b"data: {") and sse.endswith(b"}\n\n") and json.loads(sse[6:]) == first
    assert DONE == b"data: [DONE]\n\n"


def test_a_whole_completion_has_every_token_and_usage() -> None:
    body = completion("r2", "m", 5, "three word prompt", 3)
    assert body["choices"] == [{"text": " tok0 tok1 tok2", "index": 0, "logprobs": None, "finish_reason": "length"}]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
    assert (body["id"], body["object"]) == ("cmpl-r2", "text_completion")


def test_errors_are_openai_error_bodies() -> None:
    assert json.loads(error_body("full", ErrorKind.RATE_LIMIT, "queue_full")) == \
        {"error": {"message": "full", "type": "rate_limit_error", "code": "queue_full"}}
