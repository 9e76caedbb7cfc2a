Feature: Checkpoints outlive a stalled store and a node lost mid-write
  Shared checkpoint storage stops answering for tens of seconds now and then
  (an NFS server failing over, a throttled object store); the job waits in its
  checkpoint write and carries on, and nobody mistakes the pause for a hang.
  A node lost in the middle of a checkpoint write must never leave a
  half-written checkpoint that looks complete: the job resumes from the last
  complete one.

  @clause:20.1 @severity:major
  Scenario: A checkpoint store that stops answering stalls the job without a restart
    Given a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds
    And the platform restarts a job that makes no progress for 5 seconds
    When the checkpoint storage stops answering for 8 seconds
    Then the job is not restarted for 12 seconds
    And the checkpoint completes and training goes on within 5 seconds of the storage answering again

  @clause:20.2 @severity:critical
  Scenario: A node lost in the middle of a checkpoint write resumes from the last complete checkpoint
    Given a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps, each checkpoint taking 3 seconds to write
    And the job has written a checkpoint within 60 seconds
    When the job is writing a checkpoint and I pull the node of worker 0 with the configured fault method
    Then the platform detects the failure within 5 seconds
    And the job runs again on healthy nodes within 10 seconds of eviction
    And training resumes beyond the checkpoint within 10 seconds of replacement
    And training resumes from the last complete checkpoint, never from a torn one
    And every node the fault touched is back in service within 10 seconds
