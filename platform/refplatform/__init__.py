"""The reference platform: a small GPU cluster that speaks the Kubernetes API.

It exists so that Firedrill's drills run out of the box on one machine, through
the same Kubernetes driver they use against a customer's cluster.  Layers, from
the outside in (each imports only the ones below it):

- ``refplatform.api``: the HTTP API server (discovery, resources, watch, auth).
- ``refplatform.controllers``: level-triggered reconcile loops over the store.
- ``refplatform.core``: pure decisions (scheduling, healing) over a snapshot
  and an injected clock; no I/O, no wall clock.

Beside them: ``refplatform.store`` (SQLite, change log), ``refplatform.agent``
(one OS process per node) and ``refplatform.cluster`` (starts and stops it all).
"""

__version__ = "0.1.0"

# The Kubernetes version the API server reports and the agents claim to run.
KUBE_VERSION = "v1.32.0-firedrill"
