"""Running the contract: feature files checked and run through pytest-bdd.

``firedrill run`` (:mod:`drills.bdd.run`) checks every ``.feature`` file first (:mod:`drills.bdd.features`),
then runs pytest over ``drills/bdd/test_contract.py`` with :mod:`drills.bdd.plugin` (the scenario context, its
rollback, live lines and verdicts) and :mod:`drills.bdd.steps` (every drill kind's sentences, found by
:func:`drills.scenario.drill.discover`) loaded; the test module turns every scenario of the chosen directory
into a test (pytest-bdd ``scenarios``).
"""
