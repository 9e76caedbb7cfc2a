Feature: The GPUs and the fabric we paid for are there
  A GPU cluster is bought by its GPUs and by the bandwidth between them. A
  node that registers 7 of its 8 GPUs, or a link that runs at a quarter of
  its rated speed, fails nothing: jobs run on less than was paid for, and
  every synchronous job that crosses the slow link runs at its speed, every
  step. Every GPU node shows the GPUs its inventory states, and a collective
  across the cluster gets, on every node, the bandwidth the contract asks,
  measured by the workload itself, with no node far behind the others.

  @clause:17.1 @severity:major
  Scenario: Every GPU node advertises the GPUs its inventory states
    Then every GPU node advertises the GPUs its inventory states

  @clause:17.2 @severity:major
  Scenario: A collective across the cluster reaches its bandwidth floor on every node, and no node lags
    Given a gang of 4 workers with 8 GPUs each runs a collective
    When the collective's bandwidth is measured on every node
    Then every node's collective bandwidth is at least 5 MB/s
    And no node's collective bandwidth is more than 30 % below the median node's
