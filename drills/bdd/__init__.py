"""The Gherkin side of the harness: step vocabulary, pytest plugin, and the collected test module.

``firedrill run`` runs pytest over ``drills/bdd/test_contract.py`` with
``drills.bdd.plugin`` loaded; the test module turns every ``.feature`` file of
the chosen directory into tests (pytest-bdd ``scenarios``), and the steps of
``drills.bdd.steps`` perform the drills.
"""
