"""The broker's configuration: its static keys (`broker.py`, Kafka's names and defaults), the
keys that change at run time (KIP-226, `dynamic.py`) and consumer groups' own keys
(KIP-848, `groups.py`), with the file stores of standalone mode and how a change is
checked (`changes.py`)."""
