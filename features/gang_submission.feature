Feature: Gang submission
  A distributed training job gets all of its GPUs or none of them.
  A job that holds some GPUs while it waits for the rest wastes them,
  and two such jobs can wait for each other forever.

  Background:
    Given the cluster has at least 4 schedulable GPU nodes with 8 free GPUs each

  @clause:4.1 @severity:critical @conformance:gang_scheduling
  Scenario: A gang that fits is placed whole
    When I submit a gang of 8 workers with 4 GPUs each
    Then all workers are running within 30 seconds
    And partial-hold GPU-seconds stay at or below 0

  @clause:4.2 @severity:critical @conformance:gang_scheduling
  Scenario: Two gangs that each need more than half of the free GPUs
    When I submit 2 gangs of 3 workers with 8 GPUs each at the same time, each running for 3 seconds
    Then exactly one gang runs whole within 30 seconds while the others hold no GPU
    And every gang has run whole within 60 seconds
    And partial-hold GPU-seconds stay at or below 0

  @clause:4.3 @severity:critical @conformance:gang_scheduling
  Scenario: A gang that must wait for GPUs holds none while it waits
    When a gang of 2 workers with 8 GPUs each runs for 5 seconds
    And I submit a gang of 4 workers with 8 GPUs each
    Then the waiting gang runs whole within 30 seconds, holding no GPU until then
    And partial-hold GPU-seconds stay at or below 0
