"""Order enrichment: the transform of `oncelog demo`, and an example of a pipeline transform.
It ships inside the package, so the demo runs from an installed oncelog in any directory.

    oncelog pipeline run --source orders --sink enriched-orders \\
        --transform oncelog.demo.enrich:enrich_orders --checkpoint /tmp/enrich-orders

(`--transform examples/enrich_orders.py:enrich_orders` in a checkout is the same function.)

`enrich_orders(source)` gets the source stream (Spark's Kafka columns: key, value, topic,
partition, offset, timestamp, ...) and returns the rows to write: `value` (JSON), `key`
(the customer id, so one customer's orders stay in one partition) and `headers` (where
the order came from). `enrich_orders_as_rows(source)` is the same enrichment as columns,
for an Iceberg table (`oncelog demo --sink iceberg`):

    oncelog pipeline run --source orders --sink iceberg:demo.enriched_orders \\
        --transform oncelog.demo.enrich:enrich_orders_as_rows --checkpoint /tmp/lake/orders

Everything is a column expression, so it runs inside Spark's JVM; nothing here needs
Python on the executors.

An order, as the demo writes it:
    {"order_id": "o-000042", "customer_id": "c-0007", "currency": "EUR",
     "created_at": "2024-05-01T12:00:00Z",
     "items": [{"sku": "sku-013", "quantity": 2, "unit_price": 12.5}, ...]}
An enriched order adds the total, the item count and the customer's tier, joined from a
small customers table (here generated; in a real job, read from a table or file).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

CUSTOMERS = 1_000

ORDER = StructType([
    StructField("order_id", StringType()),
    StructField("customer_id", StringType()),
    StructField("currency", StringType()),
    StructField("created_at", StringType()),
    StructField("items", ArrayType(StructType([
        StructField("sku", StringType()),
        StructField("quantity", IntegerType()),
        StructField("unit_price", DoubleType()),
    ]))),
])


def customers(spark: SparkSession) -> DataFrame:
    """customer_id -> tier: every 10th customer gold, every 3rd silver, the rest bronze."""
    number = F.col("id")
    return spark.range(CUSTOMERS).select(
        F.format_string("c-%04d", number).alias("customer_id"),
        F.when(number % 10 == 0, "gold").when(number % 3 == 0, "silver").otherwise("bronze").alias("tier"),
    )


def enrich_orders(source: DataFrame) -> DataFrame:
    """For a topic: value (the enriched order as JSON), key (the customer id), headers (its source)."""
    enriched = _enriched(source)
    return enriched.select(
        F.col("customer_id").alias("key"),
        F.to_json(F.struct(*ENRICHED_FIELDS)).alias("value"),
        F.array(F.struct(
            F.lit("source").alias("key"),
            F.col("source").cast("binary").alias("value"),
        )).alias("headers"),
    )


def enrich_orders_as_rows(source: DataFrame) -> DataFrame:
    """For a table: the enriched order's fields as columns, and `source`, where it came from."""
    return _enriched(source).select(*ENRICHED_FIELDS, "source")


# The enriched order's fields, in the order the JSON value and the table's columns have them.
ENRICHED_FIELDS = ("order_id", "customer_id", "currency", "created_at", "total", "item_count", "tier")


def _enriched(source: DataFrame) -> DataFrame:
    """The enriched orders, ENRICHED_FIELDS and `source` (`orders-<partition>@<offset>`)."""
    orders = source.select(
        F.from_json(F.col("value").cast("string"), ORDER).alias("order"),
        "topic", "partition", "offset",
    )
    # Unparseable records have a null order; a production job would send them to a
    # dead-letter topic. The demo writes only valid JSON.
    orders = orders.where(F.col("order.order_id").isNotNull())
    total = F.aggregate(
        "order.items", F.lit(0.0), lambda acc, item: acc + item["quantity"] * item["unit_price"]
    )
    item_count = F.aggregate("order.items", F.lit(0), lambda acc, item: acc + item["quantity"])
    enriched = orders.select(
        F.col("order.order_id").alias("order_id"),
        F.col("order.customer_id").alias("customer_id"),
        F.col("order.currency").alias("currency"),
        F.col("order.created_at").alias("created_at"),
        F.round(total, 2).alias("total"),
        item_count.alias("item_count"),
        "topic", "partition", "offset",
    ).join(F.broadcast(customers(source.sparkSession)), "customer_id", "left")
    return enriched.select(
        "order_id", "customer_id", "currency", "created_at", "total", "item_count",
        F.coalesce("tier", F.lit("unknown")).alias("tier"),
        F.format_string("%s-%d@%d", "topic", "partition", "offset").alias("source"),
    )
