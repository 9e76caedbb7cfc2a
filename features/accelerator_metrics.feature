Feature: Every GPU we pay for reports what it is doing
  We pay for every GPU of every node, so we must be able to see each one:
  how busy it is and how much of its memory is used, in DCGM's names, from
  a metrics endpoint our own monitoring can scrape. The numbers must be
  about the GPU that did the work, they must move when the work moves, and
  a GPU's fault must show on that GPU. An exporter that keeps answering
  with numbers that never change, or with nothing at all, hides every one
  of those things, and is a failure, not a pass.

  Background:
    Given the GPU metrics of every node are read

  @clause:16.1 @severity:critical @conformance:accelerator_metrics
  Scenario: Every GPU of every node reports its utilization and memory
    Then every GPU of every node reports its utilization and memory within 10 seconds

  @clause:16.2 @severity:critical @conformance:accelerator_metrics
  Scenario: A GPU we compute on shows it, and no other GPU does
    When a canary computes on 1 GPU of an idle node
    Then that GPU's utilization rises above 50 % within 10 seconds
    And no other GPU of that node rises above 10 % meanwhile

  @clause:16.3 @severity:major @conformance:accelerator_metrics
  Scenario: An Xid shows on the GPU it hit
    Given a canary holds 1 GPU of an idle node
    When the drill injects Xid 43 on the canary's GPU
    Then the metrics show that Xid on that GPU within 10 seconds

  @clause:16.4 @severity:critical @conformance:accelerator_metrics
  Scenario: Telemetry that answers but never moves is frozen
    When a canary computes on 1 GPU of an idle node
    Then that GPU's utilization changes at least 3 times within 10 seconds
