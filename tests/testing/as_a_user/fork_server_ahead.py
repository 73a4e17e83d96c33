"""The plugin starts the broker fork server before collection (its import, most of the first
broker's start, runs while pytest starts up): it is already running when this file is
collected."""
from fork_servers import fork_servers

AT_COLLECTION = fork_servers()


def test_the_fork_server_was_running_when_this_file_was_collected(kafka_broker):
    assert AT_COLLECTION, "no fork server was running at collection"
    assert kafka_broker.proc.server.proc.pid in AT_COLLECTION  # the broker came from that one
