Feature: Secure accelerator access
  A pod reaches the GPUs it paid for and no others. A pod that asks for no GPU
  sees none, even when its image asks for every one as CUDA images do (a pod
  without a GPU request seeing every GPU of its node is a known way platforms
  get this wrong); a pod that asks for two sees exactly its own two; and no pod
  can open a GPU that another pod on the same node holds. What a pod sees and
  can open is what a probe program inside it reports: the GPU device nodes in
  its /dev, NVIDIA_VISIBLE_DEVICES, NVML's count, and which of the node's GPUs a
  real open() reached (docs/ACCESS.md).

  @clause:15.1 @severity:critical @conformance:secure_accelerator_access
  Scenario: A pod that requests no GPU sees none and can open none
    Given a GPU node with at least 2 GPUs free
    When a pod that requests no GPU runs on that node, asking for every GPU as CUDA images do
    Then the pod sees at most 0 GPUs
    And the pod can open at most 0 GPUs

  @clause:15.2 @severity:critical @conformance:secure_accelerator_access
  Scenario: A pod that requests 2 GPUs sees exactly its own 2
    Given a GPU node with at least 2 GPUs free
    When a pod that requests 2 GPUs runs on that node
    Then each pod sees exactly the GPUs it requested, by identity
    And the pod can open at most 2 GPUs

  @clause:15.3 @severity:critical @conformance:secure_accelerator_access
  Scenario: Two pods on one node cannot open each other's GPUs
    Given a GPU node with at least 2 GPUs free
    When 2 pods that request 1 GPU each run side by side on that node
    And each pod tries to open the GPUs the others hold
    Then each pod sees exactly the GPUs it requested, by identity
    And no pod opens a GPU another pod holds
