"""Newsletter sending, one module per stage of a send.

* `lock`: the email's status lock, taken over from a sender that Temporal proves gone.
* `batches`: every recipient written into exactly one batch (at once, or chunk by chunk).
* `send`: one provider call per batch, an uncertain send looked up before it is sent again.
* `finish`: the email marked submitted or failed; emails whose send closed unfinished.
* `content`: the email loaded, checked and rendered once per segment for the other stages.
* `models`: the inputs and results that cross the Temporal boundary, shared with the workflow.

The send caps and learned batch sizes are `activities/sending_limits.py`; the confirm window of an
uncertain send is `activities/confirm.py`.
"""
