Feature: A blip must not become an eviction storm
  When the control plane, or the link between it and most of the nodes, goes
  away for tens of seconds, the nodes and their training are fine: nothing
  may be evicted or restarted, no acknowledged write may be lost, and the
  nodes are Ready again soon after. A platform that takes a blip for many dead
  nodes evicts everything (kubernetes/kubernetes#28832). A node lost alone is
  still healed.

  Background:
    Given a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds

  @clause:14.1 @severity:critical
  Scenario: Training carries on while the control plane is unreachable
    When the control plane is unreachable for 10 seconds
    Then training never pauses for more than 2 seconds during the outage
    And no pod of the job is evicted or restarted within 5 seconds of the outage's end
    And every write the API server acknowledged survives the outage
    And every node is Ready again within 10 seconds of the outage's end
    And every node the fault touched is back in service within 10 seconds

  @clause:14.2 @severity:critical
  Scenario: Most nodes losing the control plane at once is a disruption, not a storm of dead nodes
    When 3 nodes, the job's among them, lose the control plane for 10 seconds
    Then training never pauses for more than 2 seconds during the outage
    And no pod of the job is evicted or restarted within 5 seconds of the outage's end
    And every node is Ready again within 10 seconds of the outage's end
    And every node the fault touched is back in service within 10 seconds

  @clause:14.3 @severity:critical
  Scenario: After a blip, a node lost alone is still healed
    When I pull the node of worker 0 with the configured fault method
    Then the platform detects the failure within 5 seconds
    And the job's pods are off the failed node within 5 seconds of detection
    And the job runs again on healthy nodes within 10 seconds of eviction
    And training resumes beyond the checkpoint within 10 seconds of replacement
    And every node the fault touched is back in service within 10 seconds
