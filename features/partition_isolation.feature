Feature: Partition isolation
  A GPU shared by several tenants keeps its promises: when one tenant uses more
  memory than its share, or its slice or its GPU faults, only the tenants the
  partitioning mode says may fail do fail, and every other tenant keeps running.
  A GPU that faults whole leaves service whole: every slice on it, not only the
  one a tenant saw the fault on. What each mode promises is the table in
  docs/PARTITIONING.md.

  @clause:7.1 @severity:critical @conformance:gpu_sharing
  Scenario Outline: One tenant misbehaves or faults on a GPU partitioned as <layout>
    Given a node of one <model> GPU partitioned as <layout>
    When every slice is filled with a tenant, up to <tenants> tenants
    Then <tenants> tenants are running
    When one tenant exceeds its memory share
    Then the tenants affected are <memory overuse>
    When one tenant's slice takes a contained fault
    Then the tenants affected are <contained fault>
    When its GPU takes a reset-class fault
    Then the tenants affected are <reset fault>
    And every slice of that GPU is out of service within 3 seconds

    Examples:
      | model     | layout                                    | tenants | memory overuse           | contained fault          | reset fault              |
      | H200      | MIG 7 x 1g.18gb                           | 7       | only that tenant         | only that tenant         | every tenant on that GPU |
      | H200      | MIG 3g.71gb + 2g.35gb + 1g.18gb + 1g.18gb | 4       | only that tenant         | only that tenant         | every tenant on that GPU |
      | H100-80GB | time-slicing x 4                          | 4       | every tenant on that GPU | every tenant on that GPU | every tenant on that GPU |
      | H100-80GB | HAMi x 4                                  | 4       | only that tenant         | every tenant on that GPU | every tenant on that GPU |

  @clause:7.2 @severity:critical @conformance:gpu_sharing
  Scenario: Filling a partitioned GPU beyond its slices is refused, and the count reached is reported
    Given a node of one H200 GPU partitioned as MIG 7 x 1g.18gb
    When every slice is filled with a tenant, up to 9 tenants
    Then 7 tenants are running
    And the other 2 tenants are refused by the scheduler
