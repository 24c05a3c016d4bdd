"""Order enrichment, the transform of `oncelog demo`, as a pipeline transform file:

    oncelog pipeline run --source orders --sink enriched-orders \\
        --transform examples/enrich_orders.py:enrich_orders --checkpoint /tmp/enrich-orders

Into an Iceberg table, the same enrichment as columns:

    oncelog pipeline run --source orders --sink iceberg:demo.enriched_orders \
        --transform examples/enrich_orders.py:enrich_orders_as_rows --checkpoint /tmp/lake/orders

The code lives in the package, src/oncelog/demo/enrich.py (so that the demo runs from an
installed oncelog too); read it there. With oncelog installed, the same transforms are
`--transform oncelog.demo.enrich:enrich_orders` and `...:enrich_orders_as_rows`.
"""

from oncelog.demo.enrich import ORDER, customers, enrich_orders, enrich_orders_as_rows

__all__ = ["ORDER", "customers", "enrich_orders", "enrich_orders_as_rows"]
