"""What every scenario is made of, whatever its drill kind: the drill lifecycle and registry
(:mod:`drills.scenario.drill`), the scenario context that holds the running drills
(:mod:`drills.scenario.context`) and the step vocabulary (:mod:`drills.scenario.vocabulary`)."""
