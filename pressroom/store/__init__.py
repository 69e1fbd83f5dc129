"""The statements a table family shares, in one home that activities, operations and the front door
all call: members (leaving; audience.py, a recipient filter as SQL), events (a batch of delivery
events made ready to store), the outbox (enqueue). A statement only one caller needs stays with
that caller."""
