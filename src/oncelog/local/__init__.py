"""Running oncelog and what it needs on this machine.

- `process`: a broker in its own process (BrokerProcess: start, stop, kill -9, restart on
  the same port), free ports;
- `cluster`: a cluster of such brokers as combined nodes (ClusterProcess), and the node
  settings `oncelog cluster start` keeps;
- `netns`: nodes in network namespaces of their own (NetworkLab), for real partitions;
- `etcd`: a local etcd cluster (EtcdCluster);
- `java`: where the Java 17+ runtime comes from (java_home), for Spark and the Java clients;
- `spark_home`: the SPARK_HOME Spark is started with (a zip-free view of the installed pyspark);
- `spark_cluster`: a Spark standalone cluster (StandaloneSpark).

Used by `oncelog cluster` (oncelog.admin.cluster), the Spark session (oncelog.spark.session,
for Java and SPARK_HOME), the chaos run (oncelog.chaos), scripts/java_home.sh, the tests and
bench. Nothing here imports oncelog.spark: the Spark side stands on this package, not the
other way round.
"""
