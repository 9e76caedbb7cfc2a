Feature: A GPU fails while its node lives
  About half of the interruptions of a large training run are a GPU or its
  memory failing while the node stays up (in Meta's 54-day Llama 3 405B run,
  faulty GPUs caused 30.1 % of them and HBM3 memory 17.2 %). The platform takes
  the failed GPU out of service, moves the rank that used it and training
  resumes from its last checkpoint, by itself, while the node's other GPUs
  keep working. An application's own error is not the GPU's: the rank
  restarts and the GPU stays in service.

  Background:
    Given a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds

  @clause:12.1 @severity:critical
  Scenario: A GPU that falls off the bus is taken out of service and its rank moves
    When the GPU of worker 0 fails with Xid 79
    Then the platform detects the failure within 3 seconds
    And the worker's pod is off the GPU within 3 seconds
    And the job runs again on healthy GPUs within 10 seconds of that
    And training resumes beyond the checkpoint within 10 seconds of replacement
    And the whole recovery takes at most 15 seconds
    And at most 10 steps of work are lost
    And no pod is given the failed GPU while it is out of order
    And every node the fault touched is back in service within 10 seconds

  @clause:12.2 @severity:critical
  Scenario: A GPU with a double-bit ECC error in its memory is taken out of service
    When the GPU of worker 1 fails with Xid 48
    Then the platform detects the failure within 3 seconds
    And the worker's pod is off the GPU within 3 seconds
    And the job runs again on healthy GPUs within 10 seconds of that
    And training resumes beyond the checkpoint within 10 seconds of replacement
    And the whole recovery takes at most 15 seconds
    And no pod is given the failed GPU while it is out of order
    And every node the fault touched is back in service within 10 seconds

  @clause:12.3 @severity:major
  Scenario: An application's own Xid restarts its rank and the GPU stays in service
    When the GPU of worker 0 fails with Xid 13
    Then the GPU stays in service for 5 seconds
    And the worker's pod is off the GPU within 3 seconds
    And the job runs again on healthy GPUs within 10 seconds of that
    And training resumes beyond the checkpoint within 10 seconds of replacement
