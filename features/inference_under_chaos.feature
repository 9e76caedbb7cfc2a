Feature: Inference under chaos
  Inference users keep their service level while the cluster is disturbed. A
  replica taken out for maintenance finishes what it took on, the load moves to
  the other replicas, and the time to the first token stays within the SLA.
  Every number comes from the users' own client (locust), never from the
  platform.

  @clause:9.1
  Scenario: Inference keeps its SLA while the node of one replica is drained
    Given an inference service of 3 replicas with 8 GPUs each behind a load balancer
    And steady load from 12 users who retry a refused request up to 2 times
    When the node of one replica is drained after 2 seconds of load
    And the load goes on for 6 seconds
    Then p99 time to first token stays within 1 second
    And at most 1 % of requests fail
    And at most 0 requests are lost

  @clause:9.2 @conformance:pod_autoscaling @conformance:ai_service_metrics
  Scenario: A burst is absorbed by scaling out
    Given an inference service of 2 replicas with 4 GPUs each behind a load balancer, scaling out to 4 replicas when more than 2 requests wait per replica, each new replica loading its model for 2 seconds
    And steady load from 4 users who retry a refused request up to 2 times
    When the load jumps to 4 times its users after 3 seconds of load
    And the load goes on for 12 seconds
    Then a new replica serves within 10 seconds of the queue crossing its threshold
    And p99 time to first token is back within 0.5 seconds no later than 12 seconds after the jump
    And at most 0 requests are lost

  @clause:9.3 @conformance:pod_autoscaling @conformance:ai_service_metrics
  Scenario: Inference and training share the cluster
    Given an inference service of 2 replicas with 8 GPUs each behind a load balancer, scaling out to 3 replicas when more than 1 requests wait per replica, each new replica loading its model for 2 seconds
    And the service scales in 8 seconds after its queue empties
    And low-priority canary training of 2 workers with 8 GPUs each fills the idle GPUs, checkpointing every 20 steps and when preempted
    And steady load from 4 users who retry a refused request up to 2 times
    When the load jumps to 3 times its users after 3 seconds of load
    And the burst ends after 8 seconds
    And the load goes on for 6 seconds
    Then a new replica serves within 10 seconds of the queue crossing its threshold
    And p99 time to first token is back within 0.5 seconds no later than 12 seconds after the jump
    And at most 0 requests are lost
    And training resumes from the checkpoint it wrote when preempted within 20 seconds of the burst's end
    And at most 5 GPU-seconds of training are lost

  @clause:9.4
  Scenario: Inference gets its SLA back soon after the node of one replica hangs
    Given an inference service of 3 replicas with 8 GPUs each behind a load balancer
    And steady load from 12 users who retry a refused request up to 2 times, giving up on a silent server after 1 second
    When the node of one replica is pulled with hang after 3 seconds of load
    And the load goes on for 10 seconds
    Then p99 time to first token is back within 0.5 seconds no later than 8 seconds after the pull
    And at most 2 % of requests fail
    And every node the fault touched is back in service within 10 seconds
