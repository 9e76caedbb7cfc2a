"""A container's environment: $(VAR) expansion, env with fieldRef, PATH (pure)."""

from __future__ import annotations

import pytest

from refplatform.agent.errors import ContainerSpecError
from refplatform.agent.podenv import PodFacts, container_path, env_sources, expand, field_value, resolve_env

FACTS = PodFacts(name="rank-0", namespace="team-a", uid="u-123", node_name="gpu-node-1", pod_ip="127.10.1.2",
                 host_ip="127.0.0.1", service_account="trainer", labels={"app": "llm"},
                 annotations={"firedrill.dev/mfu": "0.5"})


@pytest.mark.parametrize(("text", "expected"), [
    ("$(A)", "alpha"),
    ("x-$(A)-$(B)", "x-alpha-beta"),
    ("$(MISSING)", "$(MISSING)"),          # an unknown name stays as written
    ("$$(A)", "$(A)"),                     # $$ escapes the reference
    ("$$", "$"),
    ("cost $5", "cost $5"),                # $ before another character: both kept
    ("tail $", "tail $"),                  # a trailing $ is kept
    ("$(A", "$(A"),                        # an unterminated reference is kept
    ("$(A)$(A)", "alphaalpha"),
    ("$$$(A)", "$alpha"),
    ("$()", "$()"),                        # the empty name is unknown
    ("no refs", "no refs"),
])
def test_expansion_follows_the_kubelet_rules(text: str, expected: str) -> None:
    values = {"A": "alpha", "B": "beta"}
    assert expand(text, values.get) == expected


def test_every_supported_field_path_resolves() -> None:
    where = "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath"
    got = {p: field_value(p, FACTS, where) for p in (
        "metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels['app']",
        "metadata.annotations['firedrill.dev/mfu']", "metadata.labels['absent']", "spec.nodeName",
        "spec.serviceAccountName", "status.podIP", "status.hostIP")}
    assert got == {
        "metadata.name": "rank-0", "metadata.namespace": "team-a", "metadata.uid": "u-123",
        "metadata.labels['app']": "llm", "metadata.annotations['firedrill.dev/mfu']": "0.5",
        "metadata.labels['absent']": "", "spec.nodeName": "gpu-node-1", "spec.serviceAccountName": "trainer",
        "status.podIP": "127.10.1.2", "status.hostIP": "127.0.0.1",
    }


def test_an_unknown_field_path_fails_naming_the_field() -> None:
    container = {"env": [{"name": "OK", "value": "1"},
                         {"name": "PHASE", "valueFrom": {"fieldRef": {"fieldPath": "status.phase"}}}]}
    with pytest.raises(ContainerSpecError) as err:
        resolve_env(container, "spec.containers[1]", FACTS, {})
    assert str(err.value).startswith("spec.containers[1].env[1].valueFrom.fieldRef.fieldPath: "
                                     "unsupported field path 'status.phase'")


def test_env_values_reference_earlier_entries_and_injected_variables_in_order() -> None:
    container = {"env": [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "ADDR", "value": "$(POD_IP):29500"},
        {"name": "LATER_REF", "value": "$(DEFINED_LATER)"},   # not yet defined: kept
        {"name": "DEFINED_LATER", "value": "x"},
        {"name": "SOCK", "value": "$(FIREDRILL_DEVICE_SOCKET)"},
        {"name": "EMPTY"},
        {"name": "LITERAL", "value": "$$(POD_IP)"},
    ]}
    env = resolve_env(container, "spec.containers[0]", FACTS, {"FIREDRILL_DEVICE_SOCKET": "/s/dev.sock"})
    assert env == {"FIREDRILL_DEVICE_SOCKET": "/s/dev.sock", "POD_IP": "127.10.1.2", "ADDR": "127.10.1.2:29500",
                   "LATER_REF": "$(DEFINED_LATER)", "DEFINED_LATER": "x", "SOCK": "/s/dev.sock", "EMPTY": "",
                   "LITERAL": "$(POD_IP)"}


@pytest.mark.parametrize(("entry", "message"), [
    ({"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
     "spec.containers[0].env[0].valueFrom: only fieldRef, configMapKeyRef and secretKeyRef are supported by the "
     "reference platform (got resourceFieldRef)"),
    ({"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
     "spec.containers[0].env[0].valueFrom.configMapKeyRef: ConfigMap 'c' not found"),
    ({"name": "X", "valueFrom": {"secretKeyRef": {"name": "s"}}},
     "spec.containers[0].env[0].valueFrom.secretKeyRef: name and key required"),
    ({"name": "X", "valueFrom": {"fieldRef": {}}}, "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath: required"),
    ({"value": "v"}, "spec.containers[0].env[0].name: required"),
    ({"name": "X", "value": 5}, "spec.containers[0].env[0].value: must be a string"),
])
def test_bad_env_entries_name_their_field(entry: dict[str, object], message: str) -> None:
    with pytest.raises(ContainerSpecError, match="^" + message.replace("[", r"\[").replace("]", r"\]")
                       .replace("(", r"\(").replace(")", r"\)")):
        resolve_env({"env": [entry]}, "spec.containers[0]", FACTS, {})


def test_config_maps_and_secrets_fill_the_environment_env_from_first() -> None:
    container = {"envFrom": [{"configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "creds"}, "prefix": "S_"},
                             {"configMapRef": {"name": "absent", "optional": True}}],
                 "env": [{"name": "LR", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "lr"}}},
                         {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                         {"name": "MAYBE", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "nope",
                                                                          "optional": True}}},
                         {"name": "lr", "value": "override"}]}
    objects = {("ConfigMap", "cfg"): {"lr": "0.1", "bad=key": "x"}, ("Secret", "creds"): {"token": "t0k"},
               ("ConfigMap", "absent"): None}
    env = resolve_env(container, "spec.containers[0]", FACTS, {}, objects)
    assert env == {"lr": "override", "S_token": "t0k", "LR": "0.1", "TOKEN": "t0k"}
    pod = {"spec": {"containers": [container, {"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {
        "name": "absent", "key": "k"}}}]}]}}
    assert env_sources(pod) == {("ConfigMap", "cfg"): False, ("Secret", "creds"): False, ("ConfigMap", "absent"): False}


def test_the_interpreter_directory_comes_first_in_path_once() -> None:
    assert container_path("/usr/bin:/venv/bin:/bin", "/venv/bin") == "/venv/bin:/usr/bin:/bin"
    assert container_path("", "/venv/bin") == "/venv/bin"


def test_pod_facts_come_from_the_pod() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "b"}, "annotations": {"c": "d"}},
           "spec": {"nodeName": "n", "serviceAccountName": "sa"}}
    facts = PodFacts.of(pod, "127.10.0.2", "127.0.0.1")
    assert (facts.name, facts.namespace, facts.uid, facts.node_name, facts.service_account) == ("p", "ns", "u", "n", "sa")
    assert dict(facts.labels) == {"a": "b"} and dict(facts.annotations) == {"c": "d"}
    assert PodFacts.of({"metadata": {"name": "p"}}, "", "").service_account == "default"
