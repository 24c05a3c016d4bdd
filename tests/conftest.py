import gc
import sys

import pytest

from oncelog import EmbeddedBroker

_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "call" and outcome.get_result().failed:
        item.stash[_FAILED] = True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    """After a failed test, before its fixtures' brokers stop: collect what it left open.

    A test that fails midway leaves its librdkafka clients unclosed, alive in the
    failure's traceback (sys.last_traceback) until some later garbage collection. One
    destroyed after its broker has gone can spin in librdkafka forever (seen in a CI run:
    a Consumer's rd_kafka_destroy waited on a main thread at 93% CPU for 14 minutes, so
    the run hung instead of reporting one failure). Collected here, they still have a
    broker to say goodbye to.
    """
    if item.stash.get(_FAILED, False):
        sys.last_type = sys.last_value = sys.last_traceback = None
        gc.collect()


@pytest.fixture
def broker(tmp_path):
    """A fresh embedded broker on a free loopback port, its logs under tmp_path."""
    with EmbeddedBroker(tmp_path / "broker") as running:
        yield running


@pytest.fixture(scope="session")
def shared_broker(kafka_broker):
    """One embedded broker for the whole session; tests using it pick unique topic names.
    The package's pytest plugin makes it (kafka_broker, oncelog.testing.pytest_plugin),
    with KIP-939 2PC enabled by pyproject.toml's kafka_broker_config."""
    return kafka_broker


@pytest.fixture(scope="module")
def java_tools():
    """(javac, java, kafka-clients classpath) for the Java client tests (tests/support/java.py);
    skips, naming what is missing, without a JDK 17+ or the kafka-clients jar."""
    from oncelog.local import java

    try:
        javac = java.javac_executable()
        classpath = java.kafka_clients_classpath(with_logging=True)
    except (java.JavaNotFound, java.KafkaClientsNotFound) as missing:
        pytest.skip(f"Java interop tests need a JDK 17+ and the kafka-clients jar: {missing}")
    return javac, javac.parent / "java", classpath
