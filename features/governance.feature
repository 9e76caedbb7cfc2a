Feature: Governance gates
  Every control chain has a gate that really stops what it should, and a
  record of each stop that remains afterwards: a policy document is not a
  control in effect. Each chain is crossed on purpose with a tenant's own
  credentials, as a hostile or careless tenant would, and it holds only when
  the gate stopped the attempt AND the API server's audit log holds the record
  of it. Each record's digest goes into the evidence.

  Background:
    Given a tenant's own credentials and the API server's audit log

  @clause:11.1 @severity:critical
  Scenario: Admission and quota: a job over the namespace's GPU quota does not run
    When the tenant submits a pod asking for more GPUs than its namespace's quota leaves
    And the tenant submits a job asking for more GPUs than its namespace's quota leaves
    Then nothing over the quota runs within 5 seconds
    And the admission-and-quota gate stopped every attempt and the audit log holds a record of each refusal

  @clause:11.5 @severity:critical
  Scenario: Admission and quota under concurrency: requests that each fit do not run over the quota together
    When the tenant submits several pods at once, each within its namespace's quota and together over it
    Then nothing over the quota runs within 5 seconds
    And the admission-and-quota gate stopped every attempt and the audit log holds a record of each refusal

  @clause:11.2 @severity:critical
  Scenario: Access: a tenant stays in its namespace and does no scheduler's or node's work
    When the tenant reads and writes pods in another tenant's namespace
    And the tenant binds its own pod to a node, as only the scheduler may
    And a node's identity writes another node's Lease
    Then the access gate stopped every attempt and the audit log holds a record of each refusal

  @clause:11.3 @severity:critical
  Scenario: Priority: a tenant uses only its own classes and never preempts a higher one
    When the tenant creates a pod with a priority class it may not use
    And the tenant's pod needs the GPUs a pod of a higher priority class holds
    Then the pod of the higher class keeps running for 5 seconds
    And the priority gate stopped every attempt and the audit log holds a record of each refusal

  @clause:11.4 @severity:critical
  Scenario: Change control: a tenant cannot cordon, drain or delete a node
    When the tenant cordons a node
    And the tenant evicts another workload's pod
    And the tenant deletes a node
    Then the change-control gate stopped every attempt and the audit log holds a record of each refusal
