"""The collected test module of ``firedrill run``: every scenario of the chosen features becomes a test.

``firedrill run`` sets FIREDRILL_FEATURES to the absolute path of the features directory; the steps come
from the ``drills.bdd.steps`` plugin and the scenario fixture from ``drills.bdd.plugin``.
"""

import os

from pytest_bdd import scenarios

scenarios(os.environ["FIREDRILL_FEATURES"])
