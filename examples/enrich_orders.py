"""Order enrichment, the transform of `oncelog demo`, as a pipeline transform file:

    oncelog pipeline run --source orders --sink enriched-orders \\
        --transform examples/enrich_orders.py:enrich_orders --checkpoint /tmp/enrich-orders

The code lives in the package, src/oncelog/demo/enrich.py (so that the demo runs from an
installed oncelog too); read it there. With oncelog installed, the same transform is
`--transform oncelog.demo.enrich:enrich_orders`.
"""

from oncelog.demo.enrich import ORDER, customers, enrich_orders

__all__ = ["ORDER", "customers", "enrich_orders"]
