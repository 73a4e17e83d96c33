"""A session whose tests use no broker: the fork server started ahead is ended at the end of
collection."""
from fork_servers import fork_servers


def test_no_fork_server_is_left_running():
    assert fork_servers() == []
