"""The serving drill: inference users keep their service level while the node of one replica is drained or pulled.

Steady state before: a Deployment of N inference canaries (``firedrill-inference serve``, docs/WORKLOAD.md),
each asking for G GPUs so replicas land on different nodes, behind a Service of ``type: LoadBalancer``; every
replica Ready and the service answering through its load balancer. Load: locust's ``InferenceUser`` (docs/LOAD.md)
with the retry policy the feature states. Act: the node of one replica is **drained** (cordoned, then each of
the drill's pods on it evicted through the Eviction API, as ``kubectl drain`` does) or **pulled** with a fault
method (:mod:`drills.target.faults`). Observe: the load goes on for the stated time, then stops; every request's fate
comes from locust's samples, the harness's own client: nothing is read from the platform.

Measured, over every request the users sent (docs/STEPS.md):

- ``p99 time to first token``: nearest-rank p99 of the answered requests' TTFT, from the first attempt's start
  (a refused attempt and its back-off count);
- ``error rate``: the share of requests not answered after the retry policy (failed or lost), in percent;
- ``requests lost``: sent and never answered (a cut stream, a connection that died, no status line after the
  last retry).

Each lost request is named in a finding with its error and when it started relative to the act. The scenario
is INCONCLUSIVE when the service was not serving before the act (no request answered, or the steady state
already missed), since then the act proves nothing.
"""

from drills.kinds.serving.drill import ServingDrill
from drills.kinds.serving.judge import autoscaler_blind, lost_findings, sla_back
from drills.kinds.serving.manifests import (BURST_SHAPE, INFERENCE_COMMAND, LB_PORTS_ANNOTATION, PORT, SERVICE_NAME,
                                            Autoscale, ServiceShape, hpa_manifest, inference_manifests, service_url)
from drills.kinds.serving.replicas import (Reading, first_served_by_new, metric_value, pod_ready, prometheus_readings,
                                           queue_crossing, ready_endpoint_addresses)

__all__ = ["BURST_SHAPE", "INFERENCE_COMMAND", "LB_PORTS_ANNOTATION", "PORT", "SERVICE_NAME", "Autoscale", "Reading",
           "ServiceShape", "ServingDrill", "autoscaler_blind", "first_served_by_new", "hpa_manifest",
           "inference_manifests", "lost_findings", "metric_value", "pod_ready", "prometheus_readings", "queue_crossing",
           "ready_endpoint_addresses", "service_url", "sla_back"]
