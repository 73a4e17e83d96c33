"""Processes, sockets and event loops: everything the broker core leaves out."""
