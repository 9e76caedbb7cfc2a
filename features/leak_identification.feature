Feature: Leak identification
  The platform's leak report says where healthy GPU time went: which of the
  four holes (data pipeline, communication, fragmentation, fault tolerance)
  leaked the most GPU-hours. The drill opens one hole of a known size, then
  checks that the report names that hole as the largest and sizes it right.

  @clause:8.1
  Scenario Outline: The leak report names the <hole> hole we opened
    Given a workload mix that leaks GPU time through <hole> for 6 seconds
    When the platform's leak report is read for that window
    Then it names <hole> as the largest hole
    And it sizes that hole within 10 % of what was injected

    Examples:
      | hole            |
      | data pipeline   |
      | communication   |
      | fragmentation   |
      | fault tolerance |
