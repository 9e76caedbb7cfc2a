Feature: A hung job is restarted from its checkpoint, and a pause is not taken for a hang
  The costliest faults of a large training job crash nothing: one rank stops
  inside a step (a GPU stuck in a kernel, a wedged link), every other rank
  waits in the same all-reduce with its GPUs busy, every pod stays Running and
  every probe stays green, for hours. The platform notices that the job makes
  no progress, names it, and restarts it from its last checkpoint, by itself.
  A job that pauses on purpose (a long checkpoint write) is not hung: it says
  so, and restarting it would throw its work away.

  @clause:19.1 @severity:critical
  Scenario: A job hung inside a step is named, restarted and resumed from its checkpoint
    Given a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds
    And the platform restarts a job that makes no progress for 5 seconds
    When worker 1 hangs inside a step
    Then the platform names the hung job within 10 seconds of the hang
    And the job runs again within 10 seconds of the naming
    And training resumes beyond the checkpoint within 10 seconds of the restart
    And the whole recovery takes at most 25 seconds
    And at most 10 steps of work are lost
    And every node the fault touched is back in service within 10 seconds

  @clause:19.2 @severity:major
  Scenario: A checkpoint write that outlasts the threshold is not taken for a hang
    Given a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps, each checkpoint taking 7 seconds to write
    And the job has written a checkpoint within 60 seconds
    And the platform restarts a job that makes no progress for 5 seconds
    Then the job is not restarted for 10 seconds
