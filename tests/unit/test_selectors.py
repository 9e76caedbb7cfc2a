"""Label and field selectors against upstream's grammar, matching rules and error texts."""

from __future__ import annotations

from typing import Any

import pytest

from refplatform.errors import RefPlatformError
from refplatform.selectors import (
    POD_FIELD_LABELS, FieldOperator, FieldRequirement, FieldSelector, LabelSelector, Operator,
    Requirement, SelectorError, object_fields, pod_fields,
)

NAME_PART_RULE = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
                  "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', "
                  "regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
VALUE_RULE = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
              "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
              "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
SUBDOMAIN_RULE = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                  "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                  "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


# --------------------------------------------------------------------------- label selector: parsing


@pytest.mark.parametrize(("text", "canonical"), [
    ("", ""),
    ("   ", ""),
    ("a=b", "a=b"),
    ("a==b", "a==b"),
    ("a!=b", "a!=b"),
    ("a", "a"),
    ("!a", "!a"),
    ("a=", "a="),
    ("a in (x,y)", "a in (x,y)"),
    ("a in (y, x)", "a in (x,y)"),
    ("a notin (x)", "a notin (x)"),
    ("a in ()", "a in ()"),
    ("x in (foo,,baz),y,z notin ()", "x in (,baz,foo),y,z notin ()"),
    ("a in (x,)", "a in (,x)"),
    ("a in (,x)", "a in (,x)"),
    ("  b = 2 ,  a != 1 ", "a!=1,b=2"),
    ("tier in (frontend, backend), env", "env,tier in (backend,frontend)"),
    ("in in (in, notin)", "in in (in,notin)"),
    ("a=in", "a=in"),
    ("example.com/gpu-model=H200", "example.com/gpu-model=H200"),
    ("a>5,b<3", "a>5,b<3"),
    ("z=1,a=2", "a=2,z=1"),
])
def test_parse_prints_canonical_form(text: str, canonical: str) -> None:
    selector = LabelSelector.parse(text)
    assert str(selector) == canonical
    assert LabelSelector.parse(canonical) == selector  # the printed form parses back to the same selector


@pytest.mark.parametrize(("text", "requirements"), [
    ("a=b", [Requirement("a", Operator.EQUALS, ("b",))]),
    ("a==b", [Requirement("a", Operator.DOUBLE_EQUALS, ("b",))]),
    ("a!=b", [Requirement("a", Operator.NOT_EQUALS, ("b",))]),
    ("a in (c,b)", [Requirement("a", Operator.IN, ("b", "c"))]),
    ("a notin (b)", [Requirement("a", Operator.NOT_IN, ("b",))]),
    ("a", [Requirement("a", Operator.EXISTS)]),
    ("!a", [Requirement("a", Operator.DOES_NOT_EXIST)]),
    ("a>1", [Requirement("a", Operator.GREATER_THAN, ("1",))]),
    ("a<1", [Requirement("a", Operator.LESS_THAN, ("1",))]),
    ("a=", [Requirement("a", Operator.EQUALS, ("",))]),
])
def test_parse_builds_requirements(text: str, requirements: list[Requirement]) -> None:
    assert list(LabelSelector.parse(text).requirements) == requirements


@pytest.mark.parametrize(("text", "message"), [
    ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
    ("a=b c", "found 'c', expected: ',' or 'end of string'"),
    ("a=b,", "found '', expected: identifier after ','"),
    ("a=b,,c", "found ',', expected: identifier after ','"),
    (",a", "found ',', expected: !, identifier, or 'end of string'"),
    ("=a", "found '=', expected: !, identifier, or 'end of string'"),
    ("!", "unable to parse requirement: found '', expected: identifier"),
    ("!a=b", "found '=', expected: ',' or 'end of string'"),
    ("a=(b", "unable to parse requirement: found '(', expected: identifier"),
    ("a===b", "unable to parse requirement: found '=', expected: identifier"),
    ("a in b", "unable to parse requirement: found 'b' expected: '('"),
    ("a in (x", "unable to parse requirement: found '', expected: ',' or ')'"),
    ("a in (x y)", "unable to parse requirement: found 'y', expected: ',' or ')'"),
    ("a in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier"),
    ("a in (x,=)", "unable to parse requirement: found '=', expected: ',', or identifier"),
    ("app:monolith", f"unable to parse requirement: <nil>: Invalid value: \"app:monolith\": {NAME_PART_RULE}"),
    ("*bar=1", f"unable to parse requirement: <nil>: Invalid value: \"*bar\": {NAME_PART_RULE}"),
    ("a/b/c ?=? def", "unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a qualified name must "
     "consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
     "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
     "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' "
     "(e.g. 'example.com/MyName')"),
    ("app.kubernetes_io/name=x", "unable to parse requirement: <nil>: Invalid value: \"app.kubernetes_io/name\": "
     f"prefix part {SUBDOMAIN_RULE}"),
    ("/a", "unable to parse requirement: <nil>: Invalid value: \"/a\": prefix part must be non-empty"),
    ("x/", f"unable to parse requirement: <nil>: Invalid value: \"x/\": name part must be non-empty; {NAME_PART_RULE}"),
    ("k" * 64, f"unable to parse requirement: <nil>: Invalid value: \"{'k' * 64}\": "
     "name part must be no more than 63 characters"),
    ("app=demo-{nginx}", f"unable to parse requirement: values[0][app]: Invalid value: \"demo-{{nginx}}\": "
     f"{VALUE_RULE}"),
    ("a=" + "v" * 64, f"unable to parse requirement: values[0][a]: Invalid value: \"{'v' * 64}\": "
     "must be no more than 63 characters"),
    ("a in (ok,-bad)", f"unable to parse requirement: values[0][a]: Invalid value: \"-bad\": {VALUE_RULE}"),
    ("environment>qa", "unable to parse requirement: values[0]: Invalid value: \"qa\": "
     "for 'Gt', 'Lt' operators, the value must be an integer"),
])
def test_parse_errors_match_upstream(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as err:
        LabelSelector.parse(text)
    assert str(err.value) == message
    assert isinstance(err.value, RefPlatformError)


# --------------------------------------------------------------------------- label selector: matching

LABELS = {"app": "web", "tier": "frontend", "gpus": "8", "empty": ""}


@pytest.mark.parametrize(("text", "labels", "expected"), [
    ("", {}, True),
    ("", LABELS, True),
    ("app=web", LABELS, True),
    ("app==web", LABELS, True),
    ("app=db", LABELS, False),
    ("missing=x", LABELS, False),
    ("app!=db", LABELS, True),
    ("app!=web", LABELS, False),
    ("missing!=x", LABELS, True),  # != matches objects without the key
    ("app in (db,web)", LABELS, True),
    ("app in (db)", LABELS, False),
    ("missing in (x)", LABELS, False),
    ("app notin (db)", LABELS, True),
    ("app notin (web)", LABELS, False),
    ("missing notin (x)", LABELS, True),  # so does notin
    ("app", LABELS, True),
    ("missing", LABELS, False),
    ("!missing", LABELS, True),
    ("!app", LABELS, False),
    ("empty=", LABELS, True),
    ("empty", LABELS, True),
    ("missing=", LABELS, False),
    ("empty in ()", LABELS, True),
    ("app=web,tier=frontend", LABELS, True),
    ("app=web,tier=backend", LABELS, False),
    ("gpus>4", LABELS, True),
    ("gpus>8", LABELS, False),
    ("gpus<9", LABELS, True),
    ("app>1", LABELS, False),  # a value that is not an integer never compares
    ("missing<9", LABELS, False),
])
def test_label_matching(text: str, labels: dict[str, str], expected: bool) -> None:
    assert LabelSelector.parse(text).matches(labels) is expected


def test_empty_selector_matches_none_labels_and_reports_empty() -> None:
    selector = LabelSelector.parse("")
    assert selector.empty and selector.matches(None)
    assert not LabelSelector.parse("a").empty


# --------------------------------------------------------------------------- label selector: structured form


@pytest.mark.parametrize(("selector", "canonical", "labels", "expected"), [
    ({}, "", {"a": "1"}, True),
    ({"matchLabels": {"app": "web"}}, "app=web", {"app": "web"}, True),
    ({"matchLabels": {"b": "2", "a": "1"}}, "a=1,b=2", {"a": "1"}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}]},
     "tier in (a,b)", {"tier": "a"}, True),
    ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]},
     "tier notin (a)", {}, True),
    ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, "gpu", {"gpu": ""}, True),
    ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, "!gpu", {"gpu": "x"}, False),
    ({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "env", "operator": "Exists"}]},
     "app=web,env", {"app": "web", "env": "prod"}, True),
])
def test_from_dict(selector: dict[str, Any], canonical: str, labels: dict[str, str], expected: bool) -> None:
    parsed = LabelSelector.from_dict(selector)
    assert str(parsed) == canonical
    assert parsed.matches(labels) is expected


def test_nil_structured_selector_matches_nothing() -> None:
    selector = LabelSelector.from_dict(None)
    assert selector.matches_nothing and not selector.empty
    assert not selector.matches({})


@pytest.mark.parametrize(("selector", "message"), [
    ({"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["x"]}]},
     "\"Equals\" is not a valid label selector operator"),
    ({"matchExpressions": [{"key": "a", "operator": "In"}]},
     "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty"),
    ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
     "values: Invalid value: [\"x\"]: values set must be empty for exists and does not exist"),
    ({"matchExpressions": [{"key": "a b", "operator": "Exists"}]},
     f"key: Invalid value: \"a b\": {NAME_PART_RULE}"),
    ({"matchLabels": {"app": "bad value"}},
     f"values[0][app]: Invalid value: \"bad value\": {VALUE_RULE}"),
    ({"matchExpressions": [{"key": "-a", "operator": "In", "values": ["-b"]}]},
     f"[key: Invalid value: \"-a\": {NAME_PART_RULE}, values[0][-a]: Invalid value: \"-b\": {VALUE_RULE}]"),
])
def test_from_dict_errors(selector: dict[str, Any], message: str) -> None:
    with pytest.raises(SelectorError) as err:
        LabelSelector.from_dict(selector)
    assert str(err.value) == message


# --------------------------------------------------------------------------- field selectors

SUPPORTED = ("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase")


@pytest.mark.parametrize(("text", "canonical", "requirements"), [
    ("", "", []),
    ("spec.nodeName=n1", "spec.nodeName=n1",
     [FieldRequirement("spec.nodeName", FieldOperator.EQUALS, "n1")]),
    ("spec.nodeName==n1", "spec.nodeName=n1",
     [FieldRequirement("spec.nodeName", FieldOperator.EQUALS, "n1")]),
    ("status.phase!=Running", "status.phase!=Running",
     [FieldRequirement("status.phase", FieldOperator.NOT_EQUALS, "Running")]),
    ("status.phase!=Running,metadata.name=p", "metadata.name=p,status.phase!=Running",
     [FieldRequirement("metadata.name", FieldOperator.EQUALS, "p"),
      FieldRequirement("status.phase", FieldOperator.NOT_EQUALS, "Running")]),
    ("spec.nodeName=", "spec.nodeName=", [FieldRequirement("spec.nodeName", FieldOperator.EQUALS, "")]),
    ("metadata.name=a\\,b\\=c\\\\d", "metadata.name=a\\,b\\=c\\\\d",
     [FieldRequirement("metadata.name", FieldOperator.EQUALS, "a,b=c\\d")]),
    ("metadata.name=p,", "metadata.name=p", [FieldRequirement("metadata.name", FieldOperator.EQUALS, "p")]),
])
def test_field_parse(text: str, canonical: str, requirements: list[FieldRequirement]) -> None:
    selector = FieldSelector.parse(text, SUPPORTED)
    assert list(selector.requirements) == requirements
    assert str(selector) == canonical
    assert FieldSelector.parse(canonical, SUPPORTED) == selector


@pytest.mark.parametrize(("text", "message"), [
    ("spec.host=n1", "field label not supported: spec.host"),
    ("metadata.name=p,spec.unschedulable=true", "field label not supported: spec.unschedulable"),
    ("b=1,a=2", "field label not supported: a"),  # terms are checked in sorted order
    ("status.phase = Running", "field label not supported: status.phase "),  # whitespace is significant
    ("status.phase", "invalid selector: 'status.phase'; can't understand 'status.phase'"),
    ("metadata.name=p,bogus", "invalid selector: 'metadata.name=p,bogus'; can't understand 'bogus'"),
    ("metadata.name=a=b", "invalid field selector: unescaped character in value: 61"),
    ("metadata.name=a\\b", "invalid field selector: invalid escape sequence: \\b"),
    ("metadata.name=a\\", "invalid field selector: invalid escape sequence: \\"),
])
def test_field_parse_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as err:
        FieldSelector.parse(text, SUPPORTED)
    assert str(err.value) == message


def test_field_aliases_rename() -> None:
    selector = FieldSelector.parse("spec.host=n1", POD_FIELD_LABELS)
    assert str(selector) == "spec.nodeName=n1"


@pytest.mark.parametrize(("text", "fields", "expected"), [
    ("", {}, True),
    ("spec.nodeName=n1", {"spec.nodeName": "n1"}, True),
    ("spec.nodeName=n1", {"spec.nodeName": "n2"}, False),
    ("spec.nodeName=", {"spec.nodeName": ""}, True),
    ("spec.nodeName=", {}, True),  # a missing field is ""
    ("spec.nodeName!=", {"spec.nodeName": "n1"}, True),
    ("status.phase!=Running", {"status.phase": "Pending"}, True),
    ("status.phase!=Running", {}, True),
    ("status.phase!=Running,spec.nodeName=n1", {"status.phase": "Pending", "spec.nodeName": "n1"}, True),
    ("status.phase!=Running,spec.nodeName=n1", {"status.phase": "Running", "spec.nodeName": "n1"}, False),
])
def test_field_matching(text: str, fields: dict[str, str], expected: bool) -> None:
    assert FieldSelector.parse(text, SUPPORTED).matches(fields) is expected


def test_object_fields() -> None:
    obj = {"metadata": {"name": "n", "namespace": "ns"}}
    assert object_fields(obj, True) == {"metadata.name": "n", "metadata.namespace": "ns"}
    assert object_fields(obj, False) == {"metadata.name": "n"}
    assert object_fields({}, True) == {"metadata.name": "", "metadata.namespace": ""}


@pytest.mark.parametrize(("pod", "expected"), [
    ({}, {"spec.nodeName": "", "spec.restartPolicy": "", "spec.schedulerName": "",
          "spec.serviceAccountName": "", "spec.hostNetwork": "false", "status.phase": "",
          "status.podIP": "", "status.nominatedNodeName": "", "metadata.name": "", "metadata.namespace": ""}),
    ({"metadata": {"name": "p", "namespace": "d"},
      "spec": {"nodeName": "n1", "restartPolicy": "Never", "schedulerName": "volcano",
               "serviceAccountName": "sa", "hostNetwork": True},
      "status": {"phase": "Running", "podIP": "10.0.0.9", "podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}],
                 "nominatedNodeName": "n2"}},
     {"spec.nodeName": "n1", "spec.restartPolicy": "Never", "spec.schedulerName": "volcano",
      "spec.serviceAccountName": "sa", "spec.hostNetwork": "true", "status.phase": "Running",
      "status.podIP": "10.0.0.1", "status.nominatedNodeName": "n2", "metadata.name": "p",
      "metadata.namespace": "d"}),
    ({"status": {"podIP": "10.0.0.9"}}, {"status.podIP": "10.0.0.9"}),  # old objects without podIPs
])
def test_pod_fields(pod: dict[str, Any], expected: dict[str, str]) -> None:
    fields = pod_fields(pod)
    assert {k: fields[k] for k in expected} == expected


def test_pod_field_selector_end_to_end() -> None:
    pod = {"metadata": {"name": "p", "namespace": "d"}, "spec": {"nodeName": "n1"},
           "status": {"phase": "Running"}}
    assert FieldSelector.parse("spec.nodeName=n1,status.phase=Running", POD_FIELD_LABELS).matches(pod_fields(pod))
    assert not FieldSelector.parse("spec.host=n2", POD_FIELD_LABELS).matches(pod_fields(pod))
    assert FieldSelector.parse("status.podIPs=", POD_FIELD_LABELS).matches(pod_fields(pod))
