Feature: Node pull
  When a GPU node dies under a training job, the platform notices, moves the
  job to healthy nodes and training resumes from its last checkpoint, by itself.

  @clause:5.1 @severity:critical
  Scenario: A training job survives losing the node of one worker
    Given a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds
    When I pull the node of worker 0 with the configured fault method
    Then the platform detects the failure within 5 seconds
    And the job's pods are off the failed node within 5 seconds of detection
    And the job runs again on healthy nodes within 10 seconds of eviction
    And training resumes beyond the checkpoint within 10 seconds of replacement
    And the whole recovery takes at most 20 seconds
    And at most 10 steps of work are lost
    And every node the fault touched is back in service within 10 seconds

  @clause:5.2 @severity:critical
  Scenario: A partitioned node's old rank is fenced, not left training beside its replacement
    Given a canary training job of 1 worker with 8 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds
    When I pull the node of worker 0 with partition
    Then the platform detects the failure within 5 seconds
    And the job runs again on healthy nodes within 10 seconds of eviction
    And training resumes beyond the checkpoint within 10 seconds of replacement
    And no rank of the replaced job trains after the job resumes
    And every node the fault touched is back in service within 10 seconds

  @clause:5.3
  Scenario: A job that needs every working node is moved onto the spare
    Given a canary training job of 4 workers with 8 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds
    When I pull the node of worker 0 with the configured fault method
    Then the platform detects the failure within 5 seconds
    And the job's pods are off the failed node within 5 seconds of detection
    And the job runs again on healthy nodes within 10 seconds of eviction
    And training resumes beyond the checkpoint within 10 seconds of replacement
    And the whole recovery takes at most 20 seconds
    And every node the fault touched is back in service within 10 seconds
