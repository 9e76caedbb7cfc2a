"""ConfigMap and Secret admission: upstream's rules and field paths, and no Secret value in any message."""

from __future__ import annotations

import base64

from refplatform.api.configobjects import MAX_SIZE, update_causes, validate_configmap, validate_secret

VALUE = "hunter2-do-not-print"


def _b64(raw: bytes | str) -> str:
    return base64.b64encode(raw.encode() if isinstance(raw, str) else raw).decode()


def _said(causes: list) -> list[str]:
    return [f"{c.field}: {c.message}" for c in causes]


def test_string_data_is_folded_into_data_and_wins() -> None:
    secret = {"metadata": {"name": "s"}, "data": {"a": _b64("old")}, "stringData": {"a": VALUE, "b": "2"}}
    assert validate_secret(secret) == []
    assert "stringData" not in secret and secret["type"] == "Opaque"
    assert base64.b64decode(secret["data"]["a"]).decode() == VALUE and base64.b64decode(secret["data"]["b"]) == b"2"


def test_a_bad_secret_names_the_field_never_the_value() -> None:
    causes = validate_secret({"metadata": {"name": "s"}, "type": "kubernetes.io/tls",
                              "data": {"tls.crt": _b64(VALUE), "bad/key": _b64(VALUE), "x": VALUE + "!"}})
    said = _said(causes)
    assert "data[tls.key]: Required value" in said
    assert any(s.startswith('data[bad/key]: Invalid value: "bad/key": a valid config key') for s in said)
    assert any(s.startswith("data[x]: Invalid value: <secret contents redacted>") for s in said)
    assert not any(VALUE in s for s in said)


def test_size_limits_count_decoded_bytes() -> None:
    at_limit = {"metadata": {"name": "s"}, "data": {"a": _b64(b"x" * MAX_SIZE)}}
    assert validate_secret(at_limit) == []
    over = {"metadata": {"name": "s"}, "data": {"a": _b64(b"x" * MAX_SIZE), "b": _b64(b"y")}}
    assert _said(validate_secret(over)) == ["data: Too long: may not be more than 1048576 bytes"]
    cm = {"metadata": {"name": "c"}, "data": {"a": "x" * MAX_SIZE}, "binaryData": {"b": _b64(b"y")}}
    assert _said(validate_configmap(cm)) == ["data: Too long: may not be more than 1048576 bytes"]


def test_a_key_in_both_maps_and_typed_secret_requirements() -> None:
    said = _said(validate_configmap({"data": {"k": "1"}, "binaryData": {"k": _b64("1")}}))
    assert said == ['data[k]: Invalid value: "k": duplicate of key present in binaryData']
    assert _said(validate_secret({"type": "kubernetes.io/service-account-token", "metadata": {"name": "t"}})) == [
        "metadata.annotations[kubernetes.io/service-account.name]: Required value"]
    assert _said(validate_secret({"type": "kubernetes.io/dockerconfigjson", "metadata": {"name": "d"},
                                  "data": {".dockerconfigjson": _b64("{not json")}})) == [
        "data[.dockerconfigjson]: Invalid value: <secret contents redacted>: not well-formed JSON"]


def test_immutable_objects_and_secret_types_do_not_change() -> None:
    frozen = {"immutable": True, "data": {"a": "1"}}
    assert _said(update_causes("ConfigMap", frozen, {"immutable": True, "data": {"a": "2"}})) == [
        "data: Forbidden: field is immutable when `immutable` is set"]
    assert update_causes("ConfigMap", frozen, {"immutable": True, "data": {"a": "1"}, "metadata": {}}) == []
    assert _said(update_causes("Secret", {"type": "Opaque"}, {"type": "kubernetes.io/tls"})) == [
        'type: Invalid value: "kubernetes.io/tls": field is immutable']
    assert update_causes("ConfigMap", {"data": {"a": "1"}}, {"data": {"a": "2"}}) == []
