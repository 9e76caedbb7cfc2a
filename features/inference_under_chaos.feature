@conformance:ai_inference
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
    When the node of one replica is drained after 3 seconds of load
    And the load goes on for 8 seconds
    Then p99 time to first token stays within 1 second
    And at most 1 % of requests fail
    And at most 0 requests are lost
