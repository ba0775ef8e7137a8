"""Test helper: offset checkpoints written in the text of Kafka's version 0, as the current format
writes them (so tests keep stating the entries in their most readable form)."""

from logstore.log.checkpoint import format_offsets, parse_offsets


def checkpoint_text(version_0_text: str) -> str:
    """The current checkpoint text holding the entries of ``version_0_text`` (``"0\\n<count>\\n<topic>
    <partition> <offset>\\n..."``)."""
    return format_offsets(parse_offsets(version_0_text.encode())).decode()
