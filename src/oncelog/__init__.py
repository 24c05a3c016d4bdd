"""oncelog: a Kafka-protocol log with Kafka's exactly-once semantics, in Python."""

__version__ = "0.1.0"

__all__ = ["EmbeddedBroker", "__version__"]


def __getattr__(name: str):
    # Imported lazily so `import oncelog` stays cheap for CLI start-up.
    if name == "EmbeddedBroker":
        from oncelog.broker.embedded import EmbeddedBroker

        return EmbeddedBroker
    raise AttributeError(name)
