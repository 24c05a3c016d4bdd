"""The web console, on the broker's `http.listener` beside `/metrics`: open
transactions, LSO lag over time, consumer groups, producers, brokers and ISR, and the
Spark pipelines that report to it. See docs/console.md."""
