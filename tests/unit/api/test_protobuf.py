"""Protobuf request bodies (refplatform.api.protobuf): kubectl's bytes and hand-built wire data."""

from __future__ import annotations

import struct

import pytest

from refplatform.api.protobuf import MAGIC, ProtobufError, decode_object, message_for

# kubectl v1.32 `create namespace foo`, as its -v=9 log dumps the request body.
KUBECTL_CREATE_NAMESPACE = bytes.fromhex(
    "6b 38 73 00 0a 0f 0a 02 76 31 12 09 4e 61 6d 65 73 70 61 63 65 12 1b 0a 13 0a 03 66 6f 6f 12 00"
    "1a 00 22 00 2a 00 32 00 38 00 42 00 12 00 1a 02 0a 00 1a 00 22 00")


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(number: int, value: bytes | int | str) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    raw = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(raw)) + raw


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    return MAGIC + field(1, field(1, api_version) + field(2, kind)) + field(2, raw) + field(3, "") + field(4, "")


def test_kubectl_create_namespace_bytes() -> None:
    assert KUBECTL_CREATE_NAMESPACE.startswith(MAGIC)
    assert decode_object(KUBECTL_CREATE_NAMESPACE) == {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "foo"}, "spec": {}, "status": {}}


def test_pod_with_every_json_quirk() -> None:
    meta = field(1, "p") + field(11, field(1, "app") + field(2, "web")) + field(8, field(1, 1_700_000_000))
    limits = field(1, field(1, "nvidia.com/gpu") + field(2, field(1, "2")))
    port = field(2, 8080)  # IntOrString type 0 (int), intVal
    probe = field(1, field(2, field(2, port) + field(1, "/healthz")))  # Probe.handler (inline).httpGet
    container = (field(1, "main") + field(2, "busybox") + field(3, "sh") + field(3, "-c") + field(8, limits)
                 + field(10, probe) + field(16, 0))  # stdin=false: omitempty, dropped
    volume = field(1, "scratch") + field(2, field(2, b""))  # Volume.volumeSource (inline).emptyDir
    spec = field(2, container) + field(1, volume) + field(4, 0) + field(5, -5)  # grace 0 (pointer) kept
    pod = decode_object(envelope("v1", "Pod", field(1, meta) + field(2, spec)))
    assert pod["metadata"] == {"name": "p", "labels": {"app": "web"}, "creationTimestamp": "2023-11-14T22:13:20Z"}
    c = pod["spec"]["containers"][0]
    assert c["command"] == ["sh", "-c"] and c["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    assert c["livenessProbe"] == {"httpGet": {"path": "/healthz", "port": 8080}}
    assert "stdin" not in c
    assert pod["spec"]["volumes"] == [{"name": "scratch", "emptyDir": {}}]
    assert pod["spec"]["terminationGracePeriodSeconds"] == 0
    assert pod["spec"]["activeDeadlineSeconds"] == -5


def test_int_or_string_as_string_and_micro_time() -> None:
    handler = field(3, field(1, field(1, 1) + field(3, "http")))  # ProbeHandler.tcpSocket.port = "http"
    assert decode_object(envelope("v1", "Pod", field(2, field(2, field(1, "c") + field(10, field(1, handler))))))[
        "spec"]["containers"][0]["livenessProbe"] == {"tcpSocket": {"port": "http"}}
    lease = decode_object(envelope("coordination.k8s.io/v1", "Lease",
                                   field(2, field(1, "node-a") + field(4, field(1, 1) + field(2, 250_000_000))
                                         + field(2, 40))))
    assert lease["spec"] == {"holderIdentity": "node-a", "renewTime": "1970-01-01T00:00:01.250000Z",
                             "leaseDurationSeconds": 40}


def test_delete_options_and_unknown_fields_are_ignored() -> None:
    body = envelope("v1", "DeleteOptions", field(1, 30) + field(99, "future field"))
    assert decode_object(body) == {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 30}


@pytest.mark.parametrize("body, message", [
    (b"{}", "magic number"),
    (MAGIC + b"\x0a\x05\x0a", "runs past the end"),
    (envelope("v1", "ReplicationController", b""), "no protobuf decoding for ReplicationController"),
    (envelope("scheduling.volcano.sh/v1beta1", "PodGroup", b""), "no protobuf decoding for PodGroup"),
    (envelope("v1", "Pod", field(1, field(1, b"\xff\xfe"))), "not UTF-8"),
    (envelope("v1", "Pod", b"\x0b"), "unsupported wire type 3"),
])
def test_bad_bodies_name_the_problem(body: bytes, message: str) -> None:
    with pytest.raises(ProtobufError, match=message):
        decode_object(body)


def test_message_for_maps_groups_and_meta_kinds() -> None:
    assert message_for("v1", "Pod") == "k8s.io.api.core.v1.Pod"
    assert message_for("policy/v1", "Eviction") == "k8s.io.api.policy.v1.Eviction"
    assert message_for("policy/v1", "DeleteOptions") == "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions"


def test_double_is_little_endian() -> None:
    # No served message has a double field; the wire helper still reads one correctly.
    from refplatform.api.protobuf import _scalar
    assert _scalar("double", 1, struct.pack("<d", 1.5), "x") == 1.5
