Feature: Remediation you can trust
  Taking a broken GPU out of service is half of healing. The other half is
  when it comes back: only once a burn-in (a diagnostic and a short
  collective) has proven it, never while it still fails, and not at all
  when it fails again soon after it returned, until a person has looked.
  And remediation must know when not to act: when many nodes report the
  same fault at once (a bad driver roll-out, a monitoring bug), a platform
  that quarantines every one of them drains its own fleet. It acts on at
  most its budget, says it stopped, and leaves the rest to a person. A
  node drained for a fault that clears halfway stops being drained: the
  work still on it stays, and it takes work again.

  Background:
    Given a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds

  @clause:21.1 @severity:critical
  Scenario: A repaired GPU returns only after its burn-in passes
    When the GPU of worker 0 fails with Xid 79
    Then the platform detects the failure within 3 seconds
    When the GPU is repaired
    Then the GPU returns to service within 5 seconds of its burn-in passing
    And no pod is given the failed GPU while it is out of order
    And every node the fault touched is back in service within 10 seconds

  @clause:21.2 @severity:critical
  Scenario: A GPU whose burn-in fails stays out of service
    When the GPU of worker 1 fails with Xid 48
    Then the platform detects the failure within 3 seconds
    When the GPU is repaired but fails its burn-in
    Then the GPU stays out of service for 5 seconds
    And no pod is given the failed GPU while it is out of order

  @clause:21.3 @severity:major
  Scenario: A GPU that fails again soon after its return stays out
    When the GPU of worker 0 fails with Xid 79
    And the GPU is repaired
    And the GPU fails again with Xid 79 2 seconds after its return
    And the GPU is repaired
    Then the GPU stays out of service for 5 seconds
    And no pod is given the failed GPU while it is out of order

  @clause:21.4 @severity:critical
  Scenario: A fault reported by most nodes at once does not drain the fleet
    When 3 nodes away from the job report a fatal GPU fault at once
    Then the platform quarantines at most 1 of them
    And the platform says it stopped acting within 5 seconds
    And the job trains on undisturbed for 4 seconds
    And every node the fault touched is back in service within 10 seconds

  @clause:21.5 @severity:major
  Scenario: A drain stops when its node's fault clears halfway
    Given 4 single-GPU pods run on a node away from the job
    When that node reports a fatal GPU fault that clears after its first eviction
    Then the platform stops draining it within 2 seconds of the fault clearing
    And at least 2 of its pods run on undisturbed
    And the node is schedulable again within 3 seconds of the fault clearing
    And every node the fault touched is back in service within 10 seconds
