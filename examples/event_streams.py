"""The seeds' Kafka Streams application (windowed counts, branches, a stream-table join)
as one pipeline, the one `oncelog demo --stateful` runs:

    oncelog pipeline run --source input-events,reference-data \\
        --sink windowed-counts,high-priority-events,normal-priority-events,enriched-events \\
        --output-mode update --mode batch \\
        --transform examples/event_streams.py:event_streams --checkpoint /tmp/event-streams

The code lives in the package, src/oncelog/demo/streams.py (so that the demo runs from an
installed oncelog too); read it there. With oncelog installed, the same transform is
`--transform oncelog.demo.streams:event_streams`.
"""

from oncelog.demo.streams import branches, enriched, event_streams, windowed_counts

__all__ = ["branches", "enriched", "event_streams", "windowed_counts"]
