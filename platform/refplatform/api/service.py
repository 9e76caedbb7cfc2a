"""What each verb does to the store, independent of HTTP.

The HTTP layer (:mod:`refplatform.api.app`) parses a request into a call on
:class:`ApiService`; this module applies upstream semantics: admission
(defaults, validation, kind checks), optimistic concurrency, status
subresources, graceful pod deletion and finalizers, binding and eviction, and
the event filtering behind watch.  Store errors become Status errors here.
"""

from __future__ import annotations

import base64
import json
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from refplatform import jsoncodec
from refplatform.api import errors as E
from refplatform.api.auth import Identity
from refplatform.api.configobjects import fold_string_data, update_causes
from refplatform.api.jobadmission import select_own_pods
from refplatform.api.jobadmission import update_causes as job_update_causes
from refplatform.api.errors import ApiError, Cause
from refplatform.api.priority import PriorityAdmission
from refplatform.api.quota import QuotaAdmission
from refplatform.api.restrictions import Restrictions, Write
from refplatform.api.validation import pod_gpu_request, validate
from refplatform.core.accounting import UNPLACED_CONDITION
from refplatform.core.disruptionbudget import may_evict
from refplatform.fieldmanager import (
    ApplyConflict, FieldManagerError, ManagedEntry, decode_entries, encode_entries, path_string, record_update,
)
from refplatform.fieldmanager import apply as server_side_apply
from refplatform.patching import PatchError, UnsupportedPatchType, apply_patch, schema_for
from refplatform.resources import (
    CONFIGMAPS, JOBS, NAMESPACES, NODES, PDBS, PODS, REGISTRY, RESOURCEQUOTAS, SECRETS, Registry, ResourceType,
)
from refplatform.selectors import FieldSelector, LabelSelector, SelectorError, object_fields
from refplatform.store import (
    Change, ChangesCompacted, EventType, ObjectExists, ObjectNotFound, Store, VersionConflict,
)

Obj = dict[str, Any]
Clock = Callable[[], datetime]
TERMINAL_PHASES = ("Succeeded", "Failed")
GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def rfc3339(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def system_clock() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Selection:
    """Which objects a list or watch wants: a namespace ("" = all), label and field selectors."""

    namespace: str
    labels: LabelSelector
    fields: FieldSelector

    @classmethod
    def parse(cls, rt: ResourceType, namespace: str, label_selector: str | None,
              field_selector: str | None) -> "Selection":
        try:
            labels = LabelSelector.parse(label_selector or "")
            fields = FieldSelector.parse(field_selector or "", rt.field_selectors)
        except SelectorError as exc:
            raise E.bad_request(str(exc)) from None
        return cls(namespace, labels, fields)

    def matches(self, rt: ResourceType, obj: Obj) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace and meta.get("namespace") != self.namespace:
            return False
        return self.labels.matches(meta.get("labels") or {}) and \
            self.fields.matches(fields_of(rt, obj))


def fields_of(rt: ResourceType, obj: Obj) -> dict[str, str]:
    """The object's selectable fields, named as in ``rt.field_selectors``."""
    fields = object_fields(obj, rt.namespaced)
    for path in rt.field_selectors:
        if path in fields:
            continue
        cur: Any = obj
        for part in path.split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
        fields[path] = "" if cur is None else (str(cur).lower() if isinstance(cur, bool) else str(cur))
    return fields


@dataclass(frozen=True)
class DeleteOptions:
    grace_period: int | None = None
    uid: str | None = None
    resource_version: str | None = None

    @classmethod
    def from_request(cls, body: Obj | None, grace_query: str | None) -> "DeleteOptions":
        body = body or {}
        pre = body.get("preconditions") or {}
        grace = body.get("gracePeriodSeconds")
        if grace_query is not None:
            try:
                grace = int(grace_query)
            except ValueError:
                raise E.bad_request(f"gracePeriodSeconds must be an integer, got {grace_query!r}") from None
        if grace is not None and (not isinstance(grace, int) or grace < 0):
            grace = 0 if isinstance(grace, int) else None
        return cls(grace, pre.get("uid"), pre.get("resourceVersion"))


class ApiService:
    """The verbs of the Kubernetes API over one :class:`Store`."""

    def __init__(self, store: Store, registry: Registry = REGISTRY, clock: Clock = system_clock) -> None:
        self.store = store
        self.registry = registry
        self.clock = clock
        self.priority = PriorityAdmission(store)
        self.quota = QuotaAdmission(store)
        """ResourceQuota admission of pods (refplatform.api.quota); the API server sets its limited classes."""
        self.restrictions = Restrictions(lambda namespace: store.list(PODS.key, namespace)[0])
        """What a node or a tenant may write, from the object (refplatform.api.restrictions)."""
        self.lose_every = 0
        """The ``lose-acked-writes`` defect: every Nth pod create is acknowledged and never stored (0: none)."""
        self._pod_creates = 0
        for ns in SYSTEM_NAMESPACES:
            if store.find(NAMESPACES.key, "", ns) is None:
                self.create(NAMESPACES, "", {"metadata": {"name": ns}})
        self.priority.install_system_classes(self.now())

    # ------------------------------------------------------------------ helpers
    def now(self) -> str:
        return rfc3339(self.clock())

    def _require_namespace(self, rt: ResourceType, namespace: str) -> None:
        if not rt.namespaced:
            return
        ns = self.store.find(NAMESPACES.key, "", namespace)
        if ns is None:
            raise E.not_found(NAMESPACES, namespace)

    def _check_kind(self, rt: ResourceType, body: Any, namespace: str, name: str | None) -> Obj:
        if not isinstance(body, dict):
            raise E.bad_request(f"the body must be a JSON object describing a {rt.kind}, got {type(body).__name__}")
        kind, api_version = body.get("kind"), body.get("apiVersion")
        if (kind and kind != rt.kind) or (api_version and api_version != rt.api_version):
            raise E.bad_request(
                f'the object in the body is kind "{kind or "?"}", apiVersion "{api_version or "?"}", but the URL '
                f'is for {rt.group_resource}, which expects kind "{rt.kind}", apiVersion "{rt.api_version}"')
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise E.invalid(rt, "", [Cause("metadata", "Invalid value: must be an object")])
        body["kind"], body["apiVersion"] = rt.kind, rt.api_version
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise E.bad_request("the namespace of the provided object does not match the namespace "
                                    f"sent on the request ({meta['namespace']} != {namespace})")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if name is not None and meta.get("name") and meta["name"] != name:
            raise E.bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
        if name is not None:
            meta["name"] = name
        return body

    def _admit(self, rt: ResourceType, obj: Obj) -> None:
        causes = validate(rt, obj)
        if causes:
            raise E.invalid(rt, (obj.get("metadata") or {}).get("name") or "", causes)

    # -------------------------------------------------------------------- reads
    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.store.find(rt.key, namespace if rt.namespaced else "", name)
        if obj is None:
            raise E.not_found(rt, name)
        return obj

    def list(self, rt: ResourceType, sel: Selection, limit: int = 0,
             continue_token: str = "") -> tuple[list[Obj], int, str]:
        items, rv = self.store.list(rt.key, sel.namespace or None)
        if continue_token:
            try:
                start = json.loads(base64.urlsafe_b64decode(continue_token.encode()))["start"]
            except (ValueError, KeyError, TypeError):
                raise E.bad_request(f"invalid continue token {continue_token!r}") from None
            items = [o for o in items if _sort_key(o) > tuple(start)]
        items = [o for o in items if sel.matches(rt, o)]
        token = ""
        if limit and len(items) > limit:
            items = items[:limit]
            token = base64.urlsafe_b64encode(json.dumps({"start": list(_sort_key(items[-1]))}).encode()).decode()
        return items, rv, token

    def gpus_used(self) -> dict[str, int]:
        """Whole GPUs requested by non-terminal pods, per node."""
        used: dict[str, int] = {}
        pods, _ = self.store.list(PODS.key)
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node and (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES:
                used[node] = used.get(node, 0) + pod_gpu_request(pod)
        return used

    # ------------------------------------------------------------------- writes
    def create(self, rt: ResourceType, namespace: str, body: Any, by: Identity | None = None,
               dry_run: bool = False, manager: str = "") -> Obj:
        """Create an object; ``by`` is the caller (None: in-process, not restricted by identity). ``dry_run``
        (``?dryRun=All``): admit it as a create would, store nothing, answer what would have been stored.
        ``manager`` (the request's field manager) is recorded as owning every field it set, unless the body
        brings its own ``managedFields``."""
        obj = self._check_kind(rt, jsoncodec.clone(body), namespace, None)
        meta = obj["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(secrets.choice(GENERATE_ALPHABET) for _ in range(5))
        for server_owned in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                             "deletionGracePeriodSeconds", "generation"):
            meta.pop(server_owned, None)
        self._admit(rt, obj)
        if manager:
            self._track_update(rt, {}, obj, "", manager)
        self._require_namespace(rt, namespace)
        self.restrictions.check(by, Write("create", rt, "", None, obj))
        self.priority.admit_create(rt, obj)
        if rt is PODS:
            self.quota.admit(obj)
        if rt is RESOURCEQUOTAS:
            obj["status"] = self.quota.status_of(namespace, obj)
        uid = str(uuid.uuid4())
        if rt is JOBS:
            select_own_pods(obj, uid)
        if dry_run:
            if self.store.find(rt.key, namespace if rt.namespaced else "", meta["name"]) is not None:
                raise E.already_exists(rt, meta["name"])
            meta.update(uid=uid, creationTimestamp=self.now())
            return obj
        if rt is PODS and self.lose_every:
            self._pod_creates += 1
            if self._pod_creates % self.lose_every == 0:
                return self._acknowledge_only(obj)
        try:
            created = self.store.create(rt.key, obj, now=self.now(), uid=uid)
        except ObjectExists:
            raise E.already_exists(rt, meta["name"]) from None
        if rt is PODS:
            self.quota.refresh(namespace)
        return created

    def _acknowledge_only(self, obj: Obj) -> Obj:
        """The ``lose-acked-writes`` defect: the answer a stored create would get, with nothing stored."""
        meta = obj["metadata"]
        meta.update(uid=str(uuid.uuid4()), resourceVersion=str(self.store.resource_version + 1),
                    creationTimestamp=self.now())
        return obj

    def update(self, rt: ResourceType, namespace: str, name: str, body: Any, subresource: str = "",
               by: Identity | None = None, dry_run: bool = False, manager: str = "") -> Obj:
        obj = self._check_kind(rt, jsoncodec.clone(body), namespace, name)
        expect_rv = obj["metadata"].get("resourceVersion")
        if not expect_rv:
            # Upstream allows an unconditional update; it is then a plain replace.
            expect_rv = None

        def replace(current: Obj) -> Obj:
            return self._merge_update(rt, current, obj, subresource, "update", by, manager)
        return self._write(rt, namespace, name, replace, expect_rv, dry_run=dry_run)

    def patch(self, rt: ResourceType, namespace: str, name: str, body: bytes, content_type: str,
              subresource: str = "", by: Identity | None = None, dry_run: bool = False, manager: str = "") -> Obj:
        media = content_type.split(";")[0].strip().lower()
        expect: list[str | None] = [None]

        def patched(current: Obj) -> Obj:
            try:
                new = apply_patch(current, body, media, rt.kind, custom_resource=rt.custom)
            except UnsupportedPatchType as exc:
                raise E.unsupported_media_type(str(exc)) from None
            except PatchError as exc:
                reason = {400: "BadRequest", 422: "Invalid"}.get(exc.code, "InternalError")
                raise E.ApiError(exc.code, reason, str(exc), name, rt.group, rt.plural) from None
            new = self._check_kind(rt, new, namespace, name)
            expect[0] = new["metadata"].get("resourceVersion")
            if expect[0] == current["metadata"]["resourceVersion"]:
                expect[0] = None  # a patch that does not name a version applies to the latest
            return self._merge_update(rt, current, new, subresource, "patch", by, manager)
        return self._write(rt, namespace, name, patched, None, expect, dry_run=dry_run)

    def apply(self, rt: ResourceType, namespace: str, name: str, config: Any, *, manager: str, force: bool = False,
              subresource: str = "", by: Identity | None = None, dry_run: bool = False) -> tuple[Obj, bool]:
        """Server-side apply (refplatform.fieldmanager): merge ``config`` into the object, or create it; answers
        the result and whether it was created.  A field another manager set differently is a 409 Conflict
        naming it, unless ``force``."""
        if not isinstance(config, dict) or not config.get("apiVersion") or not config.get("kind"):
            raise E.bad_request("an apply configuration must be an object with its apiVersion and kind")
        config = self._check_kind(rt, jsoncodec.clone(config), namespace, name)
        if config["metadata"].get("managedFields") is not None:
            raise E.bad_request("metadata.managedFields must be nil")
        has_status = "status" in rt.subresources
        ns = namespace if rt.namespaced else ""
        for _ in range(3):
            if subresource or self.store.find(rt.key, ns, name) is not None:
                try:
                    return self._apply_to_live(rt, namespace, name, config, manager, force, subresource, by,
                                               dry_run), False
                except ApiError as exc:
                    if exc.code != 404 or subresource:
                        raise
                    continue  # deleted meanwhile: create it
            merged, entries = self._server_side_apply(rt, None, config, manager, force, subresource, has_status)
            merged["metadata"]["managedFields"] = encode_entries(entries)
            try:
                return self.create(rt, namespace, merged, by=by, dry_run=dry_run), True
            except ApiError as exc:
                if exc.reason != "AlreadyExists":
                    raise
        raise E.conflict(rt, name, "the object kept changing between apply and create; try again")

    def _apply_to_live(self, rt: ResourceType, namespace: str, name: str, config: Obj, manager: str, force: bool,
                       subresource: str, by: Identity | None, dry_run: bool) -> Obj:
        has_status = "status" in rt.subresources
        expect: list[str | None] = [None]

        def applied(current: Obj) -> Obj:
            merged, entries = self._server_side_apply(rt, current, config, manager, force, subresource, has_status)
            expect[0] = merged["metadata"].get("resourceVersion")
            if expect[0] == current["metadata"]["resourceVersion"]:
                expect[0] = None
            new = self._merge_update(rt, current, merged, subresource, "patch", by)
            new["metadata"]["managedFields"] = encode_entries(entries)
            return new
        return self._write(rt, namespace, name, applied, None, expect, dry_run=dry_run)

    def _server_side_apply(self, rt: ResourceType, current: Obj | None, config: Obj, manager: str, force: bool,
                           subresource: str, has_status: bool) -> tuple[Obj, list[ManagedEntry]]:
        name = config["metadata"]["name"]
        try:
            live = None
            entries: list[ManagedEntry] = []
            if current is not None:
                entries = decode_entries(current["metadata"].get("managedFields"), check=False)
                live = jsoncodec.clone(current)
                live["metadata"].pop("managedFields", None)
            return server_side_apply(live, config, entries, manager=manager, force=force, api_version=rt.api_version,
                                     now=self.now(), schema=schema_for(rt.kind), subresource=subresource,
                                     has_status=has_status)
        except ApplyConflict as exc:
            causes = [Cause(path_string(c.path), f"conflict with {c.manager.describe()}", "FieldManagerConflict")
                      for c in exc.conflicts]
            raise ApiError(409, "Conflict", str(exc), name, rt.group, rt.plural, causes) from None
        except FieldManagerError as exc:
            raise E.bad_request(str(exc)) from None

    def _track_update(self, rt: ResourceType, current: Obj, new: Obj, subresource: str, manager: str) -> None:
        """Record an Update by ``manager`` in ``new``'s managedFields.  A body whose managedFields differ from the
        stored ones replaces them (``[{}]`` clears them), as upstream lets a client rewrite ownership."""
        meta = new["metadata"]
        sent = meta.pop("managedFields", None)
        stored = (current.get("metadata") or {}).get("managedFields")
        if sent == [{}]:
            return
        try:
            entries = decode_entries(sent) if sent and sent != stored else decode_entries(stored, check=False)
        except FieldManagerError as exc:
            raise E.bad_request(str(exc)) from None
        old = current
        if stored is not None:
            old = dict(current, metadata={k: v for k, v in current["metadata"].items() if k != "managedFields"})
        entries = record_update(entries, old, new, manager=manager, api_version=rt.api_version, now=self.now(),
                                schema=schema_for(rt.kind), subresource=subresource,
                                has_status="status" in rt.subresources)
        if entries:
            meta["managedFields"] = encode_entries(entries)

    def _merge_update(self, rt: ResourceType, current: Obj, new: Obj, subresource: str, verb: str = "update",
                      by: Identity | None = None, manager: str = "") -> Obj:
        """Apply status-subresource and immutability rules to a proposed replacement; then the caller's
        object-level restrictions (refplatform.api.restrictions)."""
        has_status = "status" in rt.subresources
        if subresource == "status":
            result = jsoncodec.clone(current)
            result["status"] = new.get("status", {})
            new = result
        elif has_status:
            new["status"] = jsoncodec.clone(current.get("status", {}))
        meta, old_meta = new["metadata"], current["metadata"]
        for kept in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
            if kept in old_meta:
                meta[kept] = old_meta[kept]
            else:
                meta.pop(kept, None)
        if subresource != "status":
            self.priority.admit_update(rt, current, new)
        if rt is PODS and subresource != "status":
            self._check_pod_spec_update(current, new)
        if rt in (CONFIGMAPS, SECRETS, JOBS) and subresource != "status":
            causes = fold_string_data(new) if rt is SECRETS else []
            causes += job_update_causes(current, new) if rt is JOBS else update_causes(rt.kind, current, new)
            if causes:
                raise E.invalid(rt, new["metadata"]["name"], causes)
        self._admit(rt, new)
        self.restrictions.check(by, Write(verb, rt, subresource, current, new))
        if new.get("spec") != current.get("spec"):
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
        if manager:
            self._track_update(rt, current, new, subresource, manager)
        return new

    def _check_pod_spec_update(self, current: Obj, new: Obj) -> None:
        def mutable_stripped(spec: Obj) -> Obj:
            spec = jsoncodec.clone(spec or {})
            for c in spec.get("containers") or []:
                c.pop("image", None)
            for k in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"):
                spec.pop(k, None)
            return spec
        if mutable_stripped(current.get("spec")) != mutable_stripped(new.get("spec")):
            raise E.invalid(PODS, new["metadata"]["name"], [Cause(
                "spec", "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
                        "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing "
                        "tolerations) or `spec.terminationGracePeriodSeconds`; bind through pods/binding",
                "FieldValueForbidden")])

    def _write(self, rt: ResourceType, namespace: str, name: str, fn: Callable[[Obj], Obj],
               expect_rv: str | None, late_expect: list[str | None] | None = None, dry_run: bool = False) -> Obj:
        """Replace an object by ``fn(current)`` if its version is the one expected; a dry run checks the same and
        answers the replacement without storing it (its resourceVersion stays the current one's)."""
        ns = namespace if rt.namespaced else ""

        def guarded(current: Obj) -> Obj:
            new = fn(current)
            want = expect_rv or (late_expect[0] if late_expect else None)
            if want and want != current["metadata"]["resourceVersion"]:
                raise VersionConflict("the object has been modified; please apply your changes to the "
                                      "latest version and try again")
            return new
        try:
            if dry_run:
                current = self.store.find(rt.key, ns, name)
                if current is None:
                    raise ObjectNotFound(name)
                return guarded(jsoncodec.clone(current))
            result = self.store.mutate(rt.key, ns, name, guarded)
        except ObjectNotFound:
            raise E.not_found(rt, name) from None
        except VersionConflict as exc:
            raise E.conflict(rt, name, str(exc)) from None
        if rt is RESOURCEQUOTAS or (rt is PODS and (result.get("status") or {}).get("phase") in TERMINAL_PHASES):
            self.quota.refresh(ns)
        return self._finish_deletion_if_released(rt, result)

    def _finish_deletion_if_released(self, rt: ResourceType, obj: Obj) -> Obj:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and not self._awaits_node(rt, obj):
            try:
                gone = self.store.delete(rt.key, meta.get("namespace", ""), meta["name"], uid=meta["uid"])
            except (ObjectNotFound, VersionConflict):
                return obj
            if rt is PODS:
                self.quota.refresh(meta.get("namespace", ""))
            return gone
        return obj

    @staticmethod
    def _awaits_node(rt: ResourceType, obj: Obj) -> bool:
        """A pod on a node is removed by that node's agent, after its containers stop (as the kubelet does)."""
        return rt is PODS and bool((obj.get("spec") or {}).get("nodeName")) and \
            (obj.get("status") or {}).get("phase") not in TERMINAL_PHASES and \
            int(obj["metadata"].get("deletionGracePeriodSeconds", 0)) > 0

    # ------------------------------------------------------------------ delete
    def delete(self, rt: ResourceType, namespace: str, name: str, opts: DeleteOptions,
               by: Identity | None = None, dry_run: bool = False) -> Obj:
        ns = namespace if rt.namespaced else ""
        current = self.get(rt, ns, name)
        self.restrictions.check(by, Write("delete", rt, "", current, None))
        self.priority.admit_delete(rt, name)
        if opts.uid and opts.uid != current["metadata"]["uid"]:
            raise E.conflict(rt, name, f"Precondition failed: UID in precondition: {opts.uid}, "
                                       f"UID in object meta: {current['metadata']['uid']}")
        if opts.resource_version and opts.resource_version != current["metadata"]["resourceVersion"]:
            raise E.conflict(rt, name, "Precondition failed: ResourceVersion in precondition: "
                                       f"{opts.resource_version}, ResourceVersion in object meta: "
                                       f"{current['metadata']['resourceVersion']}")
        if dry_run:
            return current
        if rt is NAMESPACES:
            self._delete_namespace_contents(name)
        grace = self._grace_period(rt, current, opts)

        def mark(obj: Obj) -> Obj:
            meta = obj["metadata"]
            if not meta.get("deletionTimestamp") or grace < int(meta.get("deletionGracePeriodSeconds", 0)):
                meta["deletionTimestamp"] = rfc3339(self.clock() + timedelta(seconds=grace))
                meta["deletionGracePeriodSeconds"] = grace
            return obj
        try:
            if grace == 0 and not current["metadata"].get("finalizers"):
                gone = self.store.delete(rt.key, ns, name, uid=current["metadata"]["uid"])
                if rt is PODS:
                    self.quota.refresh(ns)
                return gone
            marked = self.store.mutate(rt.key, ns, name, mark)
        except ObjectNotFound:
            raise E.not_found(rt, name) from None
        except VersionConflict as exc:
            raise E.conflict(rt, name, str(exc)) from None
        return self._finish_deletion_if_released(rt, marked)

    def _grace_period(self, rt: ResourceType, obj: Obj, opts: DeleteOptions) -> int:
        if rt is not PODS:
            return 0
        if not (obj.get("spec") or {}).get("nodeName") or \
                (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
            return 0
        if opts.grace_period is not None:
            return opts.grace_period
        return int((obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30))

    def _delete_namespace_contents(self, namespace: str) -> None:
        for rt in self.registry.types:
            if not rt.namespaced:
                continue
            items, _ = self.store.list(rt.key, namespace)
            for obj in items:
                try:
                    self.store.delete(rt.key, namespace, obj["metadata"]["name"])
                except ObjectNotFound:
                    pass

    # ------------------------------------------------------- scale subresource
    def get_scale(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        """The ``autoscaling/v1`` Scale of a Deployment or ReplicaSet."""
        return scale_of(self.get(rt, namespace, name))

    def write_scale(self, rt: ResourceType, namespace: str, name: str, change: Callable[[Obj], Obj],
                    manager: str = "") -> Obj:
        """Set ``spec.replicas`` of the scaled object from ``change(current Scale)`` (a PUT body or a patch
        applied to it); the Scale's ``resourceVersion``, when given, must be the object's.  ``manager`` then
        owns ``spec.replicas`` through the ``scale`` subresource, as upstream records it."""
        def scaled(current: Obj) -> Obj:
            scale = change(scale_of(current))
            if not isinstance(scale, dict):
                raise E.bad_request("the body must be a JSON object describing an autoscaling/v1 Scale")
            kind, api_version = scale.get("kind"), scale.get("apiVersion")
            if (kind and kind != "Scale") or (api_version and api_version != "autoscaling/v1"):
                raise E.bad_request(f'the object in the body is kind "{kind}", apiVersion "{api_version}", but the '
                                    f'{rt.plural}/scale subresource expects kind "Scale", apiVersion "autoscaling/v1"')
            meta = scale.get("metadata") if isinstance(scale.get("metadata"), dict) else {}
            if meta.get("name") and meta["name"] != name:
                raise E.bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL "
                                    f"({name})")
            rv = meta.get("resourceVersion")
            if rv and rv != current["metadata"]["resourceVersion"]:
                raise VersionConflict("the object has been modified; please apply your changes to the latest "
                                      "version and try again")
            replicas = (scale.get("spec") or {}).get("replicas") if isinstance(scale.get("spec"), dict) else None
            if replicas is None:
                replicas = 0  # upstream: an omitted spec.replicas of a Scale is 0
            if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
                raise E.invalid(rt, name, [Cause("spec.replicas", f"Invalid value: {replicas!r}: must be greater "
                                                                  "than or equal to 0")])
            new = jsoncodec.clone(current)
            new.setdefault("spec", {})["replicas"] = replicas
            new = self._merge_update(rt, current, new, "")
            if manager:
                self._track_update(rt, current, new, "scale", manager)
            return new
        return scale_of(self._write(rt, namespace, name, scaled, None))

    # ------------------------------------------------------- pod subresources
    def bind(self, namespace: str, name: str, body: Any, by: Identity | None = None) -> Obj:
        """``POST pods/<name>/binding``: set ``spec.nodeName`` and copy the Binding's
        ``metadata.annotations`` onto the pod, in one write (upstream's BindingREST does the same, so a
        scheduler records its choice of devices with the bind instead of a patch before it)."""
        if not isinstance(body, dict) or body.get("kind") not in (None, "Binding"):
            raise E.bad_request("the body must be a Binding (kind: Binding, target: {kind: Node, name: ...})")
        target = body.get("target") or {}
        node = target.get("name")
        if not node:
            raise E.invalid(PODS, name, [Cause("target.name", "Required value", "FieldValueRequired")])
        meta = body.get("metadata") or {}
        annotations = (meta.get("annotations") or {}) if isinstance(meta, dict) else None
        if not isinstance(annotations, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()):
            raise E.invalid(PODS, name, [Cause("metadata.annotations", "Invalid value: the Binding's annotations "
                                                                      "must map strings to strings",
                                               "FieldValueInvalid")])

        def assign(pod: Obj) -> Obj:
            if pod["metadata"].get("deletionTimestamp"):
                raise E.conflict(PODS, name, "pod is being deleted, cannot be assigned to a host")
            current = (pod.get("spec") or {}).get("nodeName")
            if current:
                raise E.conflict(PODS, name, f"pod {name} is already assigned to node \"{current}\"")
            before = jsoncodec.clone(pod) if annotations and by is not None else None
            if annotations:
                pod["metadata"]["annotations"] = {**(pod["metadata"].get("annotations") or {}), **annotations}
            pod["spec"]["nodeName"] = node
            if before is not None:  # whoever may bind may also write these annotations (the object checks)
                self.restrictions.check(by, Write("create", PODS, "binding", before, pod))
            # Bound: no longer pending, so the scheduler's why-pending condition goes with PodScheduled=False.
            conds = [c for c in pod.setdefault("status", {}).get("conditions") or []
                     if c.get("type") not in ("PodScheduled", UNPLACED_CONDITION)]
            conds.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": self.now()})
            pod["status"]["conditions"] = conds
            return pod
        try:
            self.store.mutate(PODS.key, namespace, name, assign)
        except ObjectNotFound:
            raise E.not_found(PODS, name) from None
        return success(201)

    def evict(self, namespace: str, name: str, body: Any) -> Obj:
        """``pods/eviction``: a graceful delete that honours the pod's PodDisruptionBudget, as upstream: 429 when
        it would take the budget below its healthy minimum, one disruption used up (and the pod recorded in
        ``status.disruptedPods``) when it goes ahead."""
        opts = DeleteOptions.from_request((body or {}).get("deleteOptions") if isinstance(body, dict) else None, None)
        self._use_disruption_budget(namespace, self.get(PODS, namespace, name))

        def disrupt(pod: Obj) -> Obj:
            conds = [c for c in pod.setdefault("status", {}).get("conditions") or [] if c.get("type") != "DisruptionTarget"]
            conds.append({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                          "message": "Eviction API: evicting", "lastTransitionTime": self.now()})
            pod["status"]["conditions"] = conds
            return pod
        try:
            self.store.mutate(PODS.key, namespace, name, disrupt)
        except ObjectNotFound:
            raise E.not_found(PODS, name) from None
        self.delete(PODS, namespace, name, opts)
        return success(201)

    def _use_disruption_budget(self, namespace: str, pod: Obj) -> None:
        meta, status = pod["metadata"], pod.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("phase") in ("Pending", "Succeeded", "Failed"):
            return  # upstream's canIgnorePDB
        budgets = [b for b in self.store.list(PDBS.key, namespace)[0] if _budget_selects(b, pod)]
        if len(budgets) > 1:
            raise E.ApiError(500, "InternalError", "This pod has more than one PodDisruptionBudget, which the "
                                                   "eviction subresource does not support.")
        if not budgets:
            return
        healthy = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        answer = may_evict(budgets[0], healthy)
        refused = E.ApiError(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption "
                                                     "budget.", causes=[Cause("", answer.message, "DisruptionBudget")])
        if not answer.allowed:
            raise refused
        if not answer.uses_budget:
            return

        def use(pdb: Obj) -> Obj:
            st = pdb.setdefault("status", {})
            if int(st.get("disruptionsAllowed", 0)) <= 0:  # another eviction took the last one meanwhile
                raise refused
            st["disruptionsAllowed"] = int(st["disruptionsAllowed"]) - 1
            st["disruptedPods"] = {**(st.get("disruptedPods") or {}), meta["name"]: self.now()}
            return pdb
        self.store.mutate(PDBS.key, namespace, budgets[0]["metadata"]["name"], use)

    def log_target(self, namespace: str, name: str, container: str | None) -> tuple[str, int, str]:
        """Where the pod's logs are served: (node address, agent port, container)."""
        pod = self.get(PODS, namespace, name)
        names = [c["name"] for c in pod["spec"]["containers"]]
        if container is None:
            if len(names) != 1:
                raise E.bad_request(f"a container name must be specified for pod {name}, "
                                    f"choose one of: [{' '.join(names)}]")
            container = names[0]
        elif container not in names:
            raise E.bad_request(f"container {container} is not valid for pod {name}")
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            raise E.bad_request(f"pod {name} does not have a host assigned")
        # As the kubelet answers: no log before the container has started, so a pod recreated under the name of
        # one that ran on the node is never served that one's log.
        state = next(((s.get("state") or {}) for s in (pod.get("status") or {}).get("containerStatuses") or []
                      if isinstance(s, dict) and s.get("name") == container), {})
        if not state.get("running") and not state.get("terminated"):
            reason = ((state.get("waiting") or {}).get("reason")) or "ContainerCreating"
            raise E.bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')
        node = self.store.find(NODES.key, "", node_name)
        if node is None:
            raise E.not_found(NODES, node_name)
        status = node.get("status") or {}
        port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
        address = next((a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"), None)
        if not port or not address:
            raise E.service_unavailable(f"node {node_name} has no agent endpoint registered")
        return address, int(port), container

    # -------------------------------------------------------------------- watch
    def initial_events(self, rt: ResourceType, sel: Selection) -> tuple[list[tuple[str, Obj]], int]:
        items, rv, _ = self.list(rt, sel)
        return [("ADDED", o) for o in items], rv

    def events_since(self, rt: ResourceType, sel: Selection, rv: int) -> tuple[list[tuple[str, Obj]], int]:
        """Watch events after ``rv`` for one selection, and the version they bring the watcher to.

        An object that stops matching the selection is reported DELETED, one that starts matching
        ADDED, as upstream's watch cache does.  Raises 410 Gone when ``rv`` has been compacted."""
        try:
            changes = self.store.changes_since(rv)
        except ChangesCompacted as exc:
            raise E.gone(str(exc)) from None
        out: list[tuple[str, Obj]] = []
        for ch in changes:
            if ch.type_key != rt.key:
                continue
            event = translate(rt, sel, ch)
            if event:
                out.append(event)
        return out, (changes[-1].rv if changes else rv)


def translate(rt: ResourceType, sel: Selection, ch: Change) -> tuple[str, Obj] | None:
    now_match = sel.matches(rt, ch.obj)
    was_match = ch.prev is not None and sel.matches(rt, ch.prev)
    if ch.event is EventType.ADDED:
        return ("ADDED", ch.obj) if now_match else None
    if ch.event is EventType.DELETED:
        return ("DELETED", ch.obj) if was_match or now_match else None
    if now_match and was_match:
        return ("MODIFIED", ch.obj)
    if now_match:
        return ("ADDED", ch.obj)
    if was_match:
        return ("DELETED", ch.obj)
    return None


def scale_of(obj: Obj) -> Obj:
    """The ``autoscaling/v1`` Scale of a Deployment or ReplicaSet: its replicas wanted and seen, and its
    selector as a label-selector string (``status.selector``, what an autoscaler lists pods with)."""
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    match = ((spec.get("selector") or {}).get("matchLabels") or {})
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                         if k in meta},
            "spec": {"replicas": spec.get("replicas", 0)},
            "status": {"replicas": status.get("replicas", 0),
                       "selector": ",".join(f"{k}={v}" for k, v in sorted(match.items()))}}


def _budget_selects(pdb: Obj, pod: Obj) -> bool:
    """A policy/v1 budget's selector picks the pod (a null selector picks none, an empty one every pod)."""
    raw = (pdb.get("spec") or {}).get("selector")
    if raw is None:
        return False
    try:
        return LabelSelector.from_dict(raw).matches(pod["metadata"].get("labels") or {})
    except SelectorError:
        return False


def success(code: int = 200) -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


def _sort_key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


__all__ = ["ApiService", "ApiError", "DeleteOptions", "Selection", "success"]
