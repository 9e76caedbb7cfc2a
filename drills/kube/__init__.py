"""The ONE Kubernetes driver of the harness, and what it knows about clusters.

- :mod:`drills.kube.driver`: connect (kubeconfig or the embedded platform),
  list+watch with resume, retries for transient errors, stamped observations.
- :mod:`drills.kube.timeline`: what was seen, in order, with three clocks.
- :mod:`drills.kube.flavors`: how a gang is written for Volcano, Kueue or KAI.
- :mod:`drills.kube.fingerprint`: what the target is, for the evidence.
"""
