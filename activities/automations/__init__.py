"""Automations: a member's run through an automation's path, one step at a time (workflows/automations.py).

* `models`: the inputs and results that cross the Temporal boundary.
* `run`: each step reached (the member's state read, the action's revision fixed) and each email sent
  with the exactly-once protocol of the welcome email and the newsletter; the run entered at signup.
"""
