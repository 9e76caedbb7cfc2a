"""The CNCF Kubernetes AI Conformance checklists Firedrill knows, as data.

Each checklist is the program's own template (``docs/AIConformance-<X.Y>.yaml`` in cncf/k8s-ai-conformance):
requirement ids, categories, descriptions and levels exactly as the program publishes them, because a
submission "must be submitted without adjustments or changes in spec to the fields id, description, level"
(the program's instructions). Only ``status``, ``evidence`` and ``notes`` are ours to fill.

A version is added here by copying its frozen template's facts; ``firedrill conformance --version`` refuses any
other version, naming the known ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from drills.records.conformance.errors import ConformanceUsageError

__all__ = ["CHECKLISTS", "METADATA_FIELDS", "Checklist", "Level", "Requirement", "Status", "checklist"]


class Level(str, Enum):
    """How binding a requirement is, in the program's words."""

    MUST = "MUST"
    """Required: every MUST has to be Implemented, with evidence, for the platform to be conformant."""
    SHOULD = "SHOULD"
    """Recommended: may be left with an empty status and no evidence."""


class Status(str, Enum):
    """The program's status vocabulary for a requirement (its validator accepts these four and nothing else)."""

    IMPLEMENTED = "Implemented"
    """The platform meets the requirement; Firedrill says so only when every scenario tagged with it PASSed."""
    NOT_IMPLEMENTED = "Not Implemented"
    """Not met, or, from Firedrill, not shown: a tagged scenario did not PASS, or none speaks to it (the note says
    which)."""
    PARTIALLY_IMPLEMENTED = "Partially Implemented"
    """Part of it is met; a vendor's own judgement, never derived by Firedrill."""
    NOT_APPLICABLE = "N/A"
    """Does not apply to the platform (needs a note saying why); a vendor's own judgement, never derived by
    Firedrill."""


@dataclass(frozen=True)
class Requirement:
    id: str
    category: str
    """The ``spec`` key it sits under: accelerators, networking, schedulingOrchestration, observability, ..."""
    level: Level
    description: str
    """Verbatim from the program's template."""


@dataclass(frozen=True)
class Checklist:
    version: str
    """``v1.37``: the Kubernetes minor version the checklist is for."""
    requirements: tuple[Requirement, ...]
    template: str
    """Where the program publishes it (a path in cncf/k8s-ai-conformance)."""

    @property
    def categories(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.category for r in self.requirements))

    def get(self, requirement_id: str) -> Requirement | None:
        return next((r for r in self.requirements if r.id == requirement_id), None)


METADATA_FIELDS: tuple[tuple[str, bool, str], ...] = (
    ("kubernetesVersion", True, ""),
    ("platformName", True, "[Platform Name]"),
    ("platformVersion", True, "[Platform Version]"),
    ("vendorName", True, "[Vendor Name]"),
    ("websiteUrl", True, "[Website URL]"),
    ("repoUrl", False, "[Repository URL]"),
    ("documentationUrl", True, "[Documentation URL]"),
    ("productLogoUrl", True, "[Product Logo URL]"),
    ("description", True, "[Description]"),
    ("contactEmailAddress", True, "[Contact Email Address]"),
    ("k8sConformanceUrl", True, "[K8s Conformance URL]"),
)
"""PRODUCT.yaml's ``metadata`` fields: (name, required by the program's validator, the placeholder written when
the vendor gave none). A placeholder in brackets is what the program's template ships and what its validator
refuses, so an unfilled field cannot slip through review."""

_S, _M = Level.SHOULD, Level.MUST

V1_37 = Checklist("v1.37", template="docs/AIConformance-1.37.yaml", requirements=(
    Requirement("driver_runtime_management", "accelerators", _S,
                "Provide a verifiable mechanism for ensuring that compatible accelerator drivers and corresponding "
                "container runtime configurations are correctly installed and maintained on nodes with accelerators. "
                "Once the accelerator supports exposing driver and runtime version information as part of DRA, then "
                "the platform should use the DRA mechanism for verification."),
    Requirement("gpu_sharing", "accelerators", _S,
                "For accelerators that support static GPU sharing, provide well-defined mechanisms for at least one "
                "GPU sharing strategy to improve utilization for workloads that do not require a full dedicated GPU. "
                "If hardware-level partitioning is supported, then these fractional GPU resources should be exposed "
                "as schedulable resources. If software-based sharing (e.g. time-slicing) is supported, then "
                "oversubscription of GPUs should be allowed. Forward-looking: Once the accelerator supports static "
                "GPU sharing as part of DRA, the platform should expose the DRA mechanism to allow users to leverage "
                "static GPU sharing. Once the accelerator supports dynamic GPU sharing as part of DRA and the "
                "partitionable devices feature is GA, the platform should expose the DRA mechanism to allow users to "
                "leverage dynamic GPU sharing."),
    Requirement("virtualized_accelerator", "accelerators", _S,
                "For accelerators that support virtualized accelerator technologies (e.g. vGPU), provide "
                "well-defined mechanisms for these to be exposed and managed, maintaining consistency with physical "
                "fractional GPUs. Forward-looking: Once the accelerator supports virtualized accelerator technologies "
                "as part of DRA, then the platform should use the DRA mechanism."),
    Requirement("ai_inference", "networking", _M,
                "Support the Kubernetes Gateway API with an implementation for advanced traffic management for "
                "inference services, which enables capabilities like weighted traffic splitting, header-based "
                "routing (for OpenAI protocol headers), and optional integration with service meshes."),
    Requirement("advanced_inference_ingress", "networking", _S,
                "Support an implementation of the Gateway API Inference Extension (GAIE), which can route requests "
                "to models hosted on Kubernetes. The implementation supports serving LLMs and making advanced "
                "routing decisions (e.g., K/V cache-aware routing) based on metrics and capabilities advertised by "
                "the underlying model serving platform."),
    Requirement("high_performance_networking", "networking", _S,
                "If high performance pod-to-pod communication is needed, then provide well-defined mechanisms for "
                "these specialized network resources to be managed and exposed such that their characteristics "
                "should be discoverable to enable informed scheduling or workload configuration and to enable pods "
                "to attach to multiple network interfaces. Platforms should use DRA as the mechanism to manage and "
                "expose these specialized network resources (e.g., DRANET)."),
    Requirement("disaggregated_inference", "networking", _S,
                "Support the deployment and operation of disaggregated inference architectures. To be conformant, "
                "the platform should demonstrate that it can successfully install and run a disaggregated inference "
                "solution (e.g., vLLM, SGLang, llm-d, or Dynamo, with separate instances for distinct phases like "
                "prefill and decode). Disaggregated serving splits phases such as prefill and decode into separately "
                "scalable components so each phase can match different compute/memory/network needs, improving GPU "
                "utilization and tail latency while enabling higher throughput under mixed and bursty LLM "
                "workloads."),
    Requirement("gang_scheduling", "schedulingOrchestration", _M,
                "The platform must allow for the installation and successful operation of at least one gang "
                "scheduling solution that ensures all-or-nothing scheduling for distributed AI workloads (e.g. "
                "Kueue, Volcano, etc.) To be conformant, the vendor must demonstrate that their platform can "
                "successfully run at least one such solution."),
    Requirement("cluster_autoscaling", "schedulingOrchestration", _M,
                "If the platform provides a cluster autoscaler or an equivalent mechanism, it must be able to scale "
                "up/down node groups containing specific accelerator types based on pending pods requesting those "
                "accelerators."),
    Requirement("pod_autoscaling", "schedulingOrchestration", _M,
                "If the platform supports the HorizontalPodAutoscaler, it must function correctly for pods "
                "utilizing accelerators. This includes the ability to scale these Pods based on custom metrics "
                "relevant to AI/ML workloads."),
    Requirement("accelerator_metrics", "observability", _M,
                "For supported accelerator types, the platform must allow for the installation and successful "
                "operation of at least one accelerator metrics solution that exposes fine-grained performance "
                "metrics via a standardized, machine-readable metrics endpoint. This must include a core set of "
                "metrics for per-accelerator utilization and memory usage. Additionally, other relevant metrics such "
                "as temperature, power draw, and interconnect bandwidth should be exposed if the underlying hardware "
                "or virtualization layer makes they available. The list of metrics should align with emerging "
                "standards, such as OpenTelemetry metrics, to ensure interoperability. The platform may provide a "
                "managed solution, but this is not required for conformance."),
    Requirement("ai_service_metrics", "observability", _M,
                "Provide a monitoring system capable of discovering and collecting metrics from workloads that "
                "expose them in a standard format (e.g. Prometheus exposition format). This ensures easy integration "
                "for collecting key metrics from common AI frameworks and servers."),
    Requirement("secure_accelerator_access", "security", _M,
                "Ensure that access to accelerators from within containers is properly isolated and mediated by the "
                "Kubernetes resource management framework (device plugin or DRA) and container runtime, preventing "
                "unauthorized access or interference between workloads."),
    Requirement("workload_sandboxing", "security", _S,
                "Provide a mechanism to run workloads in a sandbox that provides strong isolation from the host node "
                "kernel. This is crucial for AI agent use cases that may execute untrusted code. The sandbox should "
                "isolate the workload's process, memory, filesystem, and network access from the host node and other "
                "co-located pods."),
    Requirement("robust_controller", "operator", _M,
                "The platform must prove that at least one complex AI operator with a CRD (e.g., Ray, Kubeflow) can "
                "be installed and functions reliably. This includes verifying that the operator's pods run "
                "correctly, its webhooks are operational, and its custom resources can be reconciled."),
))

CHECKLISTS: dict[str, Checklist] = {V1_37.version: V1_37}
"""Every checklist Firedrill can fill, by version."""


def checklist(version: str) -> Checklist:
    """The checklist of ``version`` (``v1.37``; ``1.37`` is accepted too); a usage error naming the known ones
    otherwise."""
    key = version if version.startswith("v") else f"v{version}"
    if key not in CHECKLISTS:
        raise ConformanceUsageError(
            f"--version {version!r}: Firedrill knows the CNCF Kubernetes AI Conformance checklist of "
            f"{', '.join(CHECKLISTS)} only; pass one of those (a new version is added in "
            "drills/records/conformance/versions.py from the program's frozen template)")
    return CHECKLISTS[key]
