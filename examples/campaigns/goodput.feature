Feature: Goodput under a fault mix
  A single drill proves one recovery; what a customer pays for is what the
  recoveries add up to: the share of GPU time that turns into training
  progress while faults keep coming. Meta kept more than 90 % effective
  training time through 419 unexpected interruptions in 54 days. Here the
  faults come as a seeded Poisson process drawn from a published mix, one at a
  time, and the effective training time is read from the canary's own log.

  @clause:15.1 @severity:critical
  Scenario: Training keeps its goodput under the Llama 3 interruption mix
    Given a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds
    And the campaign's seed is 405
    And the platform restarts a job that makes no progress for 10 seconds
    When faults from the llama3-405b mix arrive every 20 seconds on average for 3 minutes
    Then effective training time is at least 70 %
    And every fault is recovered automatically within 30 seconds
    And at most 10 steps are lost per fault

  @clause:15.2 @severity:critical
  Scenario: A job on every working node keeps its goodput while nodes are lost
    Given a canary training job of 4 workers with 8 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds
    And the campaign's seed is 7
    When faults from the node-loss mix arrive every 20 seconds on average for 60 seconds
    Then effective training time is at least 60 %
    And every fault is recovered automatically within 30 seconds
    And at most 10 steps are lost per fault

  @clause:15.3 @severity:critical
  Scenario: A job on one node resumes from its checkpoints every time a node is lost
    Given a canary training job of 1 worker with 8 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds
    And the campaign's seed is 11
    When faults from the node-loss mix arrive every 20 seconds on average for 60 seconds
    Then effective training time is at least 60 %
    And every fault is recovered automatically within 30 seconds
    And at most 10 steps are lost per fault
