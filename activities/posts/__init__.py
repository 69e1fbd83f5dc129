"""Scheduled posts, one module per stage.

* `models`: the post's workflow id, and the inputs and results that cross the Temporal boundary.
* `publish`: the publish activity (posts due together published by one statement) and the reconcile.
* `schedule`: a post's workflow started, moved or stopped; all of them reconciled with the rows.
"""
