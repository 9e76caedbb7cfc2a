Feature: A slow GPU is named and its job gets its speed back
  A GPU held down by thermal or power capping fails nothing: it runs slow,
  and synchronous training runs at the speed of its slowest rank, every
  step, for as long as nobody notices. The platform names the slow GPU's
  node and gets the job back to its speed, by itself. A job that slows
  down as a whole (waiting on its input) is no node's fault: naming a
  node then accuses a healthy one.

  Background:
    Given a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds

  @clause:13.1 @severity:major
  Scenario: A GPU throttled to a quarter of its speed is named and its job gets its speed back
    When the GPU of worker 0 slows to 25 % of its speed
    Then the platform names the slow node within 10 seconds
    And the job's step time is back within 20 % of its pre-fault median within 10 seconds of the naming
    And the job's step time is back within 20 % of its pre-fault median within 60 seconds of the fault
    And every node the fault touched is back in service within 10 seconds

  @clause:13.2 @severity:major
  Scenario: A job slowed alike on every rank by its input has no node named
    When every worker waits 300 ms longer for its input each step
    Then no node is named for 10 seconds
    And every node the fault touched is back in service within 10 seconds
