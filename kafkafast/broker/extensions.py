"""Broker extensions: code outside the core that hooks into a broker, found by name.

The core offers one seam and imports none of its users. A package declares an extension
as an entry point in the group `kafkafast.broker_extensions` (setup.py): the entry point's
name is the broker property that turns it on, its object a factory called as
`factory(broker, value)` with that property's value. The test control of `kafkafast.testing`
(faults and the manual clock, property `kafkafast.testing.control`) is one.

What an extension object may offer, each optional: `handle_frame(frame, connection)` (it
then receives every client connection's request frames instead of `Broker.handle_frame`;
one extension at most), `start()` (called once the broker is started, on its loop) and
`async stop()` (called first when it stops).
"""
from __future__ import annotations

import logging
from importlib.metadata import entry_points
from typing import Any

GROUP = "kafkafast.broker_extensions"
logger = logging.getLogger("kafkafast.broker")


def load_extensions(broker: Any, config: Any) -> list[Any]:
    """The extensions whose property is set in `config`, made for `broker`."""
    made = []
    found = entry_points(group=GROUP)
    if not found:  # e.g. a source tree on PYTHONPATH whose package metadata was never made
        logger.warning("no broker extensions are registered (kafkafast's package metadata lacks the entry "
                       "point group %s: `pip install -e .` or `python setup.py egg_info` makes it)", GROUP)
    for ep in found:
        value = config.get(ep.name)
        if value:
            made.append(ep.load()(broker, value))
    return made


def frame_hook(extensions: list[Any]) -> Any:
    """The extension that takes client request frames, or None."""
    hooks = [e for e in extensions if hasattr(e, "handle_frame")]
    if len(hooks) > 1:
        raise ValueError(f"more than one broker extension takes request frames: {hooks}")
    return hooks[0] if hooks else None
