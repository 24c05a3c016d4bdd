import pytest

from oncelog import EmbeddedBroker


@pytest.fixture
def broker(tmp_path):
    """A fresh embedded broker on a free loopback port, its logs under tmp_path."""
    with EmbeddedBroker(tmp_path / "broker") as running:
        yield running


@pytest.fixture(scope="session")
def shared_broker(tmp_path_factory):
    """One embedded broker for the whole session; tests using it pick unique topic names."""
    with EmbeddedBroker(tmp_path_factory.mktemp("shared-broker")) as running:
        yield running
