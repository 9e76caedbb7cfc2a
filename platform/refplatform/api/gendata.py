"""Developer tool: derive the API server's package data from upstream sources (run by hand, not at run time).

Writes two files under ``refplatform/api/data/`` (docs/KUBECTL.md, "Where the schemas come from"):

``k8s-protobuf.json``
    The protobuf field table of the built-in messages kubectl and client-go send
    (Pod, Namespace, Node, Event, Binding, Eviction, Lease, Deployment, ReplicaSet, Service,
    EndpointSlice, HorizontalPodAutoscaler, Scale, PriorityClass, ResourceQuota, ConfigMap, Secret,
    ServiceAccount, SelfSubjectAccessReview, SelfSubjectRulesReview, SelfSubjectReview, DeleteOptions and
    every message they reach): field number, JSON name, wire type, and the Go struct tags
    that decide the JSON form (omitempty, pointer, ``json:",inline"``).  Read from
    ``generated.proto`` and the Go types of the ``k8s.io/api`` and
    ``k8s.io/apimachinery`` modules (Apache-2.0), e.g. from the Go module cache::

        python -m refplatform.api.gendata --gomodcache "$(go env GOMODCACHE)" --k8s-version v0.37.2 \
            --crds ../shared/crds

``volcano-openapi.json``
    The ``openAPIV3Schema`` of each served version of the Volcano CRDs (PodGroup,
    Queue, Job), converted from the upstream CustomResourceDefinition YAML
    (volcano-sh/volcano, Apache-2.0; the copies and their commits are listed in
    shared/crds/SOURCES.md).

The server reads only these files; it never reads the Go module cache or shared/.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

DATA_DIR = Path(__file__).parent / "data"
PROTO_FILE = "k8s-protobuf.json"
VOLCANO_FILE = "volcano-openapi.json"

#: proto package -> (Go module, folder in the module)
PACKAGES: dict[str, tuple[str, str]] = {
    "k8s.io.api.core.v1": ("api", "core/v1"),
    "k8s.io.api.coordination.v1": ("api", "coordination/v1"),
    "k8s.io.api.policy.v1": ("api", "policy/v1"),
    "k8s.io.api.apps.v1": ("api", "apps/v1"),
    "k8s.io.api.discovery.v1": ("api", "discovery/v1"),
    "k8s.io.api.autoscaling.v1": ("api", "autoscaling/v1"),
    "k8s.io.api.autoscaling.v2": ("api", "autoscaling/v2"),
    "k8s.io.api.scheduling.v1": ("api", "scheduling/v1"),
    "k8s.io.api.authorization.v1": ("api", "authorization/v1"),
    "k8s.io.api.batch.v1": ("api", "batch/v1"),
    "k8s.io.api.scheduling.v1alpha3": ("api", "scheduling/v1alpha3"),
    "k8s.io.api.authentication.v1": ("api", "authentication/v1"),
    "k8s.io.apimachinery.pkg.apis.meta.v1": ("apimachinery", "pkg/apis/meta/v1"),
    "k8s.io.apimachinery.pkg.runtime": ("apimachinery", "pkg/runtime"),
    "k8s.io.apimachinery.pkg.runtime.schema": ("apimachinery", "pkg/runtime/schema"),
    "k8s.io.apimachinery.pkg.util.intstr": ("apimachinery", "pkg/util/intstr"),
    "k8s.io.apimachinery.pkg.api.resource": ("apimachinery", "pkg/api/resource"),
}

#: The messages a client sends as request bodies to the resources served here.
ROOTS = (
    "k8s.io.api.core.v1.Pod", "k8s.io.api.core.v1.Namespace", "k8s.io.api.core.v1.Node",
    "k8s.io.api.core.v1.Event", "k8s.io.api.core.v1.Binding", "k8s.io.api.policy.v1.Eviction",
    "k8s.io.api.coordination.v1.Lease", "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "k8s.io.apimachinery.pkg.runtime.Unknown",
    "k8s.io.api.apps.v1.Deployment", "k8s.io.api.apps.v1.ReplicaSet", "k8s.io.api.core.v1.Service",
    "k8s.io.api.discovery.v1.EndpointSlice",
    "k8s.io.api.autoscaling.v2.HorizontalPodAutoscaler", "k8s.io.api.autoscaling.v1.Scale",
    "k8s.io.api.scheduling.v1.PriorityClass", "k8s.io.api.core.v1.ResourceQuota",
    "k8s.io.api.core.v1.ConfigMap", "k8s.io.api.core.v1.Secret", "k8s.io.api.core.v1.ServiceAccount",
    "k8s.io.api.authorization.v1.SelfSubjectAccessReview", "k8s.io.api.authorization.v1.SelfSubjectRulesReview",
    "k8s.io.api.authentication.v1.SelfSubjectReview", "k8s.io.api.batch.v1.Job",
    "k8s.io.api.policy.v1.PodDisruptionBudget",
    # not sent by clients, but described in the OpenAPI documents (refplatform.api.openapi)
    "k8s.io.api.core.v1.PodList", "k8s.io.api.core.v1.NamespaceList", "k8s.io.api.core.v1.NodeList",
    "k8s.io.api.core.v1.EventList", "k8s.io.api.coordination.v1.LeaseList",
    "k8s.io.api.apps.v1.DeploymentList", "k8s.io.api.apps.v1.ReplicaSetList", "k8s.io.api.core.v1.ServiceList",
    "k8s.io.api.discovery.v1.EndpointSliceList", "k8s.io.api.autoscaling.v2.HorizontalPodAutoscalerList",
    "k8s.io.api.scheduling.v1.PriorityClassList", "k8s.io.api.core.v1.ResourceQuotaList",
    "k8s.io.api.core.v1.ConfigMapList", "k8s.io.api.core.v1.SecretList", "k8s.io.api.core.v1.ServiceAccountList",
    "k8s.io.api.batch.v1.JobList", "k8s.io.api.policy.v1.PodDisruptionBudgetList",
    "k8s.io.apimachinery.pkg.apis.meta.v1.Status", "k8s.io.apimachinery.pkg.apis.meta.v1.TypeMeta",
)

SCALARS = frozenset({"string", "bytes", "bool", "int32", "int64", "uint32", "uint64", "double", "float",
                     "sint32", "sint64", "fixed32", "fixed64"})
MARKERS = ("patchStrategy", "patchMergeKey", "listType", "listMapKey")

_FIELD = re.compile(r"^\s*(optional|repeated|required)?\s*(map<\s*([\w.]+)\s*,\s*([\w.]+)\s*>|[\w.]+)\s+(\w+)\s*=\s*(\d+)")
_MESSAGE = re.compile(r"^message (\w+) \{")
_MARKER = re.compile(r"^\s*//\s*\+(\w+)=(\S+)")


class GenDataError(Exception):
    """Upstream sources missing or not in the expected shape."""


def _resolve(name: str, package: str) -> str:
    if name in SCALARS:
        return name
    if name.startswith("."):
        return name[1:]
    return f"{package}.{name}"


def _doc(lines: list[str]) -> str:
    """Comment lines as openapi-gen writes a description: markers dropped, lines joined, paragraphs kept."""
    paras: list[list[str]] = [[]]
    for line in lines:
        if line.startswith("+"):
            continue
        if line.startswith("---"):
            break
        if not line.strip():
            if paras[-1]:
                paras.append([])
            continue
        paras[-1].append(line.strip())
    return "\n\n".join(" ".join(p) for p in paras if p)


def parse_proto(text: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """(package, {message: {"doc": ..., "fields": [field, ...]}}) of one generated.proto."""
    package = ""
    messages: dict[str, dict[str, Any]] = {}
    current: list[dict[str, Any]] | None = None
    comments: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("//"):
            comments.append(stripped[2:].removeprefix(" "))
            continue
        if line.startswith("package "):
            package = line.split()[1].rstrip(";")
            comments = []
            continue
        m = _MESSAGE.match(line)
        if m:
            current = []
            messages[f"{package}.{m.group(1)}"] = {"doc": _doc(comments), "fields": current}
            comments = []
            continue
        if line.startswith("}"):
            current = None
            comments = []
            continue
        if current is None or not stripped:
            comments = []
            continue
        f = _FIELD.match(line)
        if not f:
            raise GenDataError(f"cannot read proto field line {line!r} in package {package}")
        entry: dict[str, Any] = {"name": f.group(5), "number": int(f.group(6)), "doc": _doc(comments)}
        if f.group(3):
            entry["map"] = [_resolve(f.group(3), package), _resolve(f.group(4), package)]
        else:
            entry["type"] = _resolve(f.group(2), package)
            entry["repeated"] = f.group(1) == "repeated"
        for c in comments:
            mk = _MARKER.match("// " + c)
            if mk and mk.group(1) in MARKERS:
                entry[mk.group(1)] = mk.group(2)
            elif c.strip() in ("+optional", "+required"):
                entry[c.strip()[1:]] = True
        comments = []
        current.append(entry)
    if not package:
        raise GenDataError("a generated.proto without a package line")
    return package, messages


_STRUCT = re.compile(r"^type (\w+) struct \{")
_TAG = re.compile(r'(\w+):"([^"]*)"')


def parse_go_tags(sources: Iterable[str]) -> dict[tuple[str, int], dict[str, Any]]:
    """{(Go struct, protobuf field number): {json, omitempty, pointer, inline}} from Go sources."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for text in sources:
        struct = None
        for line in text.splitlines():
            m = _STRUCT.match(line)
            if m:
                struct = m.group(1)
                continue
            if line.startswith("}"):
                struct = None
                continue
            if struct is None or "`" not in line or line.strip().startswith("//"):
                continue
            decl, tag = line.split("`", 1)
            tags = dict(_TAG.findall(tag))
            if "protobuf" not in tags:
                continue
            pb_parts = tags["protobuf"].split(",")
            if len(pb_parts) < 2 or not pb_parts[1].isdigit():
                continue
            words = decl.split()
            go_type = words[-1] if words else ""
            json_parts = tags.get("json", "").split(",")
            embedded = len(words) == 1
            out[(struct, int(pb_parts[1]))] = {
                "json": json_parts[0],
                "omitempty": "omitempty" in json_parts[1:],
                # encoding/json inlines an embedded struct without a JSON name, as ",inline" says outright
                "inline": "inline" in json_parts[1:] or (embedded and not json_parts[0]),
                "pointer": go_type.startswith("*"),
            }
    return out


def build_proto_table(module_dirs: dict[str, Path]) -> dict[str, Any]:
    """The field table of every message reachable from :data:`ROOTS`."""
    messages: dict[str, dict[str, Any]] = {}
    tags: dict[str, dict[tuple[str, int], dict[str, Any]]] = {}
    for package, (module, folder) in PACKAGES.items():
        directory = module_dirs[module] / folder
        proto = directory / "generated.proto"
        if not proto.is_file():
            raise GenDataError(f"{proto} is missing; is the module version right?")
        parsed_package, found = parse_proto(proto.read_text())
        if parsed_package != package:
            raise GenDataError(f"{proto} declares package {parsed_package}, expected {package}")
        messages.update(found)
        tags[package] = parse_go_tags(p.read_text() for p in sorted(directory.glob("*.go"))
                                      if not p.name.endswith("_test.go"))
    table: dict[str, Any] = {}
    todo = list(ROOTS)
    while todo:
        name = todo.pop()
        if name in table:
            continue
        if name not in messages:
            raise GenDataError(f"message {name} is not in the parsed packages")
        package, struct = name.rsplit(".", 1)
        fields: dict[str, Any] = {}
        for f in messages[name]["fields"]:
            go = tags[package].get((struct, f["number"]), {})
            entry: dict[str, Any] = {"json": go.get("json") or f["name"]}
            if "map" in f:
                entry["map"] = f["map"]
                refs = [t for t in f["map"] if t not in SCALARS]
            else:
                entry["type"] = f["type"]
                if f["repeated"]:
                    entry["repeated"] = True
                refs = [] if f["type"] in SCALARS else [f["type"]]
            for flag in ("omitempty", "inline", "pointer"):
                if go.get(flag):
                    entry[flag] = True
            for marker in (*MARKERS, "optional", "required"):
                if marker in f:
                    entry[marker] = f[marker]
            if f["doc"]:
                entry["doc"] = f["doc"]
            fields[str(f["number"])] = entry
            todo.extend(refs)
        table[name] = {"doc": messages[name]["doc"], "fields": fields}
    return {"source": "generated.proto and Go struct tags of k8s.io/api and k8s.io/apimachinery",
            "messages": dict(sorted(table.items()))}


def build_volcano(crd_dir: Path) -> dict[str, Any]:
    """{"group/version/Kind": {plural, scope, schema}} from the upstream Volcano CRD YAML."""
    out: dict[str, Any] = {}
    files = sorted(crd_dir.glob("*.yaml"))
    if not files:
        raise GenDataError(f"no CRD YAML in {crd_dir}")
    for path in files:
        crd = yaml.safe_load(path.read_text())
        spec = crd["spec"]
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            key = f"{spec['group']}/{version['name']}/{spec['names']['kind']}"
            out[key] = {"plural": spec["names"]["plural"], "scope": spec["scope"], "source": path.name,
                        "schema": version["schema"]["openAPIV3Schema"]}
    return {"source": "volcano-sh/volcano config/crd/volcano/bases (Apache-2.0), see shared/crds/SOURCES.md",
            "crds": out}


def write_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=None, separators=(",", ":"), sort_keys=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m refplatform.api.gendata", description=__doc__.split("\n\n")[0])
    p.add_argument("--gomodcache", type=Path, help="Go module cache holding k8s.io/api and k8s.io/apimachinery")
    p.add_argument("--k8s-version", default="v0.37.2", help="module version of k8s.io/api and apimachinery")
    p.add_argument("--crds", type=Path, help="shared/crds (its volcano/ folder is read)")
    p.add_argument("--out", type=Path, default=DATA_DIR)
    args = p.parse_args(argv)
    try:
        if args.gomodcache:
            dirs = {m: args.gomodcache / "k8s.io" / f"{m}@{args.k8s_version}" for m in ("api", "apimachinery")}
            table = build_proto_table(dirs)
            table["version"] = args.k8s_version
            write_json(args.out / PROTO_FILE, table)
            print(f"{args.out / PROTO_FILE}: {len(table['messages'])} messages")
        if args.crds:
            doc = build_volcano(args.crds / "volcano")
            write_json(args.out / VOLCANO_FILE, doc)
            print(f"{args.out / VOLCANO_FILE}: {', '.join(doc['crds'])}")
    except (GenDataError, OSError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
