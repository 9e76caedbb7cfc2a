"""Is a real cluster's scheduler asked to keep a gang inside one domain of a label at all?  Read before the topology
drill creates anything, so that a cluster that was never set up for it is INCONCLUSIVE, naming what it lacks,
instead of a FAIL for a promise nobody made.

- ``kueue``: the profile's LocalQueue -> its ClusterQueue -> the ResourceFlavors it uses -> the Topology each
  names (``spec.topologyName``): one of them must have a level on the label (Kueue's own objects, read with
  ``get``; Kueue admits a pod set whose annotation names a label no Topology level has nowhere).
- ``native``: a server-side dry run of the gang's PodGroup: kube-apiserver keeps ``schedulingConstraints`` only
  while its ``TopologyAwareWorkloadScheduling`` gate is on (it drops the field otherwise, without an error).
- other flavors: ``TopologyDrill.unsupported`` already said why, before the scenario started.
"""

from __future__ import annotations

from typing import Any

from drills.kube.driver import KubeDriver, KubeError, resource_for
from drills.kube.flavors import GangFlavor, GangSpec, native_pod_group
from drills.target.profile import TargetProfile

__all__ = ["KUEUE_API", "kueue_problem", "native_problem", "scheduler_problem"]

Obj = dict[str, Any]
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"


def scheduler_problem(driver: KubeDriver, profile: TargetProfile, label: str, run_id: str) -> str:
    """Why the profile's flavor on this cluster would not keep a gang inside one domain of ``label``; "" when it
    is asked to."""
    if profile.flavor is GangFlavor.KUEUE:
        return kueue_problem(driver, profile, label)
    if profile.flavor is GangFlavor.NATIVE:
        return native_problem(driver, profile, label, run_id)
    return ""


def _get(driver: KubeDriver, path: str) -> Obj | None:
    try:
        return driver.request("GET", path, retry=False)
    except KubeError as exc:
        if exc.code == 404:
            return None
        raise


def kueue_problem(driver: KubeDriver, profile: TargetProfile, label: str) -> str:
    """Why Kueue would not place the gang by topology on ``label``, from Kueue's own objects; "" when it would."""
    queue = _get(driver, f"{KUEUE_API}/namespaces/{profile.namespace}/localqueues/{profile.queue}")
    if queue is None:
        return (f"the profile's LocalQueue {profile.namespace}/{profile.queue} does not exist, so Kueue admits no "
                "gang there")
    cq_name = (queue.get("spec") or {}).get("clusterQueue", "")
    cq = _get(driver, f"{KUEUE_API}/clusterqueues/{cq_name}") or {}
    flavors = [f.get("name", "") for g in (cq.get("spec") or {}).get("resourceGroups") or []
               for f in g.get("flavors") or []]
    seen = []
    for name in flavors:
        topology = ((_get(driver, f"{KUEUE_API}/resourceflavors/{name}") or {}).get("spec") or {}).get("topologyName")
        if not topology:
            seen.append(f"ResourceFlavor {name} names no topology")
            continue
        levels = [lv.get("nodeLabel") for lv in ((_get(driver, f"{KUEUE_API}/topologies/{topology}") or {})
                                                  .get("spec") or {}).get("levels") or []]
        if label in levels:
            return ""
        seen.append(f"Topology {topology} (of ResourceFlavor {name}) has levels {', '.join(levels) or 'none'}")
    return (f"Kueue would not keep a gang inside one domain of {label}: ClusterQueue {cq_name or '?'} of LocalQueue "
            f"{profile.queue} has no ResourceFlavor whose Topology has a level on that label ("
            + ("; ".join(seen) or "it has no flavors") + "); create a Kueue Topology with that level and name it in "
            "the flavor's spec.topologyName (docs/REAL_CLUSTERS.md, 'Topology: a gang inside one rack')")


def native_problem(driver: KubeDriver, profile: TargetProfile, label: str, run_id: str) -> str:
    """Why kube-apiserver would not keep a native PodGroup's topology constraint (a server-side dry run of one,
    nothing stored); "" when it keeps it."""
    probe = native_pod_group(GangSpec(name=f"topology-probe-{run_id}", run_id=run_id, workers=1, gpus_per_worker=0,
                                      image=profile.canary_image, namespace=profile.namespace,
                                      required_topology=label))
    try:
        kept = driver.request("POST", resource_for(probe).path(profile.namespace), probe, query={"dryRun": "All"},
                              retry=False)
    except KubeError as exc:
        if exc.code == 404:
            return (f"the cluster does not serve podgroups in {probe['apiVersion']}, which the native gang flavor "
                    "writes (Kubernetes 1.37 with the GenericWorkload feature gate on and "
                    "--runtime-config=scheduling.k8s.io/v1beta1=true; docs/REAL_CLUSTERS.md)")
        raise
    if ((kept.get("spec") or {}).get("schedulingConstraints") or {}).get("topology"):
        return ""
    return (f"kube-apiserver drops a PodGroup's spec.schedulingConstraints.topology (key {label}): its "
            "TopologyAwareWorkloadScheduling feature gate is off, so no scheduler is asked to keep a gang inside one "
            "domain; turn the gate on in kube-apiserver and kube-scheduler (alpha since 1.36; docs/REAL_CLUSTERS.md, "
            "'Topology: a gang inside one rack')")
