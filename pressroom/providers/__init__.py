"""Email providers behind one port (`port.py`): Mailgun in its own package, an in-memory provider
for the fast tier, and the wiring that picks one from the settings (`wiring.py`)."""
