"""Controllers: level-triggered reconcile loops, run in their own process like kube-controller-manager.

Each controller reads shared informer caches (list + watch over HTTP, see
:mod:`refplatform.controllers.informer`), decides, and writes back through
the API, never through the store, so the API server's admission, audit and
watch semantics apply to controllers exactly as to any client.  Decisions
that must be replayable (scheduling, healing) are delegated to the pure
:mod:`refplatform.core`.
"""
