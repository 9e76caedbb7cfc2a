"""The reference platform's Kubernetes-shaped API server.

``python -m refplatform.api --data-dir DIR`` serves it on loopback; see
:mod:`refplatform.api.server` for start-up and :mod:`refplatform.api.app` for
the HTTP surface.
"""
