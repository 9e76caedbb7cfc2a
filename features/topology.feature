Feature: A gang stays inside one rack
  A training job whose ranks talk over the rack's own switch (or one NVLink
  domain) steps at full speed; spread over racks, every collective crosses
  the slower spine. A job that asks to stay inside one rack is placed inside
  one, or waits whole, holding nothing, until one rack can hold it, and it
  stays inside one rack when its job is restarted after a node is lost. A
  rack is the set of nodes that share one value of the rack label; name your
  cluster's own label in the Background.

  Background:
    Given a rack is the set of nodes that share the label cloud.provider.com/topology-rack
    And the cluster has at least 2 racks with 16 free GPUs each

  @clause:18.1 @severity:critical
  Scenario: A gang that fits in one rack is placed inside one rack
    Given another job holds 4 GPUs on each node of one rack
    When I submit a gang of 4 workers with 4 GPUs each that must stay inside one rack
    Then every worker runs inside one rack within 30 seconds

  @clause:18.2 @severity:critical
  Scenario: A gang that fits the cluster but no single rack waits whole
    When I submit a gang of 3 workers with 8 GPUs each that must stay inside one rack
    Then the gang places no pod and holds no GPU for 3 seconds

  @clause:18.3 @severity:major
  Scenario: A waiting gang is placed inside the first rack that frees up
    Given another job holds 4 GPUs on each node of every rack for 4 seconds
    When I submit a gang of 4 workers with 4 GPUs each that must stay inside one rack
    Then the gang places no pod and holds no GPU until a rack frees up
    And every worker runs inside one rack within 30 seconds of a rack freeing up

  @clause:18.4 @severity:critical
  Scenario: A gang that loses a node comes back inside one rack
    Given a canary training job of 2 workers with 8 GPUs each that must stay inside one rack, checkpointing every 5 steps
    And the job has written a checkpoint within 60 seconds
    When I pull the node of worker 0 with kill
    Then the job runs again inside one rack within 30 seconds of the pull
    And training resumes beyond the checkpoint within 30 seconds of replacement
    And every node the fault touched is back in service within 10 seconds
