"""Deliver a widget update message the way a page would (tests of the panels' callbacks)."""


def forge(widget, state: dict) -> None:
    """Deliver an update message to ``widget`` as the kernel's comm layer would (forged or not)."""
    widget._handle_msg({"content": {"data": {"method": "update", "state": state, "buffer_paths": []}},
                        "buffers": []})
