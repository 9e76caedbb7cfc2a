Feature: The control plane under chaos
  The API server and the scheduler keep the Kubernetes service levels while a
  node dies: mutating calls answer within a second, new pods start within five
  seconds, and nothing the API acknowledged is lost. Every number comes from
  the harness's own clients and watches. The pods started are GPU pods, so
  the GPUs handed out while a node dies are checked too.

  @clause:10.1 @severity:critical
  Scenario: The control plane holds its SLOs while a node is pulled
    Given steady control-plane load from 4 users writing, listing and watching pods
    And 2 pods of 1 GPU each are started every second, each running for 5 seconds
    When a node is pulled with the configured fault method after 2 seconds of load
    And the load goes on for 5 seconds
    Then mutating API calls have a p99 latency within 1 second
    And pod startup has a p99 latency within 5 seconds
    And every write the API acknowledged is found afterwards
