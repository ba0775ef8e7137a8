"""The README's Kafka protocol server section: its Python snippet runs as written (in a temporary
working dir) and prints what the text says it prints; the serve command prints the line it shows."""

import contextlib
import io
import os
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def server_section() -> str:
    text = README.read_text()
    start = text.index("## Kafka protocol server")
    return text[start:text.index("\n## ", start + 1)]


def test_the_python_snippet_runs_and_both_sides_see_both_records(tmp_path, monkeypatch):
    (snippet,) = re.findall(r"```python\n(.*?)```", server_section(), re.S)
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(snippet, "README.md", "exec"), {})
    lines = printed.getvalue().splitlines()
    assert lines[0] == "[(0, b'from-python', b'1'), (1, b'from-kafka', b'2')]"
    assert "key=b'from-kafka', value=b'2', headers=(('source', b'wire'),)" in lines[1]
    assert os.path.exists(tmp_path / "data" / "meta.properties")


def test_the_documented_settings_are_the_servers():
    from logstore.server.server_config import SERVER_KEYS
    section = server_section()
    for key in SERVER_KEYS:
        assert f"`{key}`" in section, key
