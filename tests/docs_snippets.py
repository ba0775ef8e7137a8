"""The code blocks of the README and the documentation pages, and how the snippet runner runs them.

Owns the parsing of a page's fenced blocks (their info string, and the runner directive an HTML
comment just before a block may give), the rules for which blocks are commands, and running one
page's blocks in order in a temporary working dir (``tests/test_docs_snippets.py`` drives it):

- ```` ```python ````: run in one namespace per page; a block's trailing ``# ...`` comment lines,
  after its last line of code, are what it prints (a line ending in ``...`` matches as a prefix);
- ```` ```sh ````, ```` ```shell ````, ```` ```bash ````: run with bash (``set -euo pipefail``: every
  command must succeed), this interpreter's ``logstore`` first on ``PATH``;
- ```` ```console ````: each ``$ command`` runs with bash and must succeed; the lines shown after it
  (up to the next command or blank line) are its output (a ``...`` line stands for any lines);
- any other info string (``text``, ``properties``, ``json``...) marks a block that is not a command:
  it is not run. A block without an info string is an error: say what it is.

Directives, ``<!-- snippet: WORD WORD=VALUE ... -->`` on the line before a block:

- ``claimed-by=PATH id=NAME``: a specialised test (the file ``PATH``) runs this block, with what a
  plain run cannot give (a Spark session, TLS material, real clients); it gets the block's text with
  ``block(page, NAME)``, and the runner checks that the file asks for that name;
- ``serve``: the block's first line starts ``logstore ... serve`` in the background (``&``); the
  runner starts it on a free loopback port instead of the one shown, waits until it listens, puts
  the real address wherever the block shows the one given, runs the rest, then stops the server by
  its pid (SIGTERM) and checks that it exited cleanly;
- ``needs=TOOL,TOOL``: tools from outside Python (``tests/external_tools.py``): where one is missing
  the page's run skips from there on, saying which.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import select
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
PYTHON = {"python", "py"}
SHELL = {"sh", "shell", "bash"}
CONSOLE = {"console"}
NOT_COMMANDS = {"text", "properties", "json", "jsonl", "ini", "toml", "yaml", "output", "csv", "javascript"}
DIRECTIVE = re.compile(r"^<!--\s*snippet:\s*(.*?)\s*-->\s*$")
SERVE_TIMEOUT_S = 30
COMMAND_TIMEOUT_S = 120


def pages() -> list[Path]:
    """Every page whose blocks must run: the README and the Markdown pages under docs/, but the
    reference pages generated from the code (docs/reference/)."""
    found = [REPOSITORY / "README.md"]
    found.extend(path for path in sorted((REPOSITORY / "docs").rglob("*.md"))
                 if "reference" not in path.relative_to(REPOSITORY / "docs").parts)
    return found


def page_name(path: Path) -> str:
    return path.relative_to(REPOSITORY).as_posix()


@dataclass
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    info: str
    text: str
    directives: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def kind(self) -> str:
        """python, shell, console, or text (not a command)."""
        if self.info in PYTHON:
            return "python"
        if self.info in SHELL:
            return "shell"
        if self.info in CONSOLE:
            return "console"
        if self.info in NOT_COMMANDS:
            return "text"
        raise ValueError(f"{self.where}: a code block with info string {self.info!r}: give it one of "
                         f"{sorted(PYTHON | SHELL | CONSOLE | NOT_COMMANDS)}")


def blocks(page: str | Path) -> list[Block]:
    """The fenced blocks of ``page`` (a path, or a name relative to the repository), in order."""
    path = Path(page) if Path(page).is_absolute() else REPOSITORY / page
    lines = path.read_text(encoding="utf-8").splitlines()
    found, index = [], 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("```"):
            info = line[3:].strip().split(" ")[0]
            end = index + 1
            while end < len(lines) and not lines[end].startswith("```"):
                end += 1
            directives = {}
            matched = DIRECTIVE.match(lines[index - 1]) if index else None
            if matched:
                for word in shlex.split(matched.group(1)):
                    key, _, value = word.partition("=")
                    directives[key] = value
            found.append(Block(page_name(path), index + 1, info, "\n".join(lines[index + 1:end]) + "\n", directives))
            index = end + 1
        else:
            index += 1
    return found


def block(page: str, name: str) -> str:
    """The text of the block of ``page`` whose directive says ``id=name`` (for the test that claims it)."""
    for candidate in blocks(page):
        if candidate.directives.get("id") == name:
            return candidate.text
    raise LookupError(f"{page} has no block with id={name}")


# --- expected output -------------------------------------------------------------------------------

def python_expected(text: str) -> list[str] | None:
    """The trailing ``# ...`` lines of a Python block (what it prints), or None when it shows none."""
    lines = text.rstrip("\n").splitlines()
    shown = []
    while lines and lines[-1].startswith("# "):
        shown.insert(0, lines.pop()[2:])
    return shown if shown and lines else None


def output_matches(actual: list[str], expected: list[str]) -> bool:
    """``expected`` against ``actual``: a ``...`` line matches any run of lines (none too), a line
    ending in ``...`` any line it begins."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head.strip() == "...":
        return any(output_matches(actual[i:], rest) for i in range(len(actual) + 1))
    if not actual:
        return False
    if head.endswith("...") and actual[0].startswith(head[:-3].rstrip()):
        return output_matches(actual[1:], rest)
    return actual[0].rstrip() == head.rstrip() and output_matches(actual[1:], rest)


def console_commands(text: str) -> list[tuple[str, list[str]]]:
    """The ``$ command`` lines of a console block with the output shown after each (up to the next
    command or a blank line)."""
    commands: list[tuple[str, list[str]]] = []
    collecting = False
    for line in text.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
            collecting = True
        elif not line.strip():
            collecting = False
        elif collecting and commands:
            commands[-1][1].append(line)
    return commands


# --- running ---------------------------------------------------------------------------------------

def environment() -> dict[str, str]:
    """The environment commands run in: this interpreter's bin dir (its ``logstore``) first on PATH,
    and none of the variables that would point the CLI elsewhere."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("LOGSTORE_")
           or key.startswith("LOGSTORE_REQUIRE") or key == "LOGSTORE_TEST_NODE_MODULES"}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


class PageRun:
    """One page's blocks run in order in ``workdir``: one Python namespace, one shell environment."""

    def __init__(self, workdir: Path, require_tool) -> None:
        self.workdir = workdir
        self.require_tool = require_tool
        self.namespace: dict = {"__name__": "__docs__"}
        self.env = environment()
        self.env["HOME"] = str(workdir)  # what a page writes under ~ (shell completion files) stays in the work dir

    def run(self, block: Block) -> None:
        for tool in filter(None, block.directives.get("needs", "").split(",")):
            self.require_tool(tool)
        if "serve" in block.directives:
            self.run_serving(block)
        elif block.kind == "python":
            self.run_python(block, block.text)
        elif block.kind == "shell":
            self.run_shell(block, block.text)
        elif block.kind == "console":
            self.run_console(block, block.text)

    def run_python(self, block: Block, text: str) -> None:
        printed = io.StringIO()
        cwd = os.getcwd()
        os.chdir(self.workdir)
        try:
            with contextlib.redirect_stdout(printed):
                exec(compile(text, block.where, "exec"), self.namespace)
        finally:
            os.chdir(cwd)
        expected = python_expected(text)
        if expected is not None:
            actual = printed.getvalue().splitlines()
            assert output_matches(actual, expected), f"{block.where} printed {actual}, the page shows {expected}"

    def bash(self, script: str, block: Block) -> subprocess.CompletedProcess:
        done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], cwd=self.workdir, env=self.env,
                              capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, (f"{block.where}: exit {done.returncode}\n{script}\nstdout:\n{done.stdout}\n"
                                      f"stderr:\n{done.stderr}")
        return done

    def run_shell(self, block: Block, text: str) -> None:
        self.bash(text, block)

    def run_console(self, block: Block, text: str) -> None:
        for command, expected in console_commands(text):
            done = self.bash(command, block)
            if expected:
                actual = done.stdout.splitlines()
                assert output_matches(actual, expected), (f"{block.where}: `{command}` printed\n{done.stdout}"
                                                          f"the page shows\n" + "\n".join(expected))

    def run_serving(self, block: Block) -> None:
        first, rest = block.text.split("\n", 1)
        command = first.split("#", 1)[0].strip().removeprefix("$ ")
        assert command.endswith("&") and " serve" in command, f"{block.where}: a serve block starts `logstore ... serve ... &`"
        words = shlex.split(command[:-1])
        shown = {}  # option -> the address the page shows
        for option in ("--listen", "--metrics-listen"):
            if option in words:
                at = words.index(option)
                shown[option] = words[at + 1] if ":" in words[at + 1] else "127.0.0.1:" + words[at + 1].lstrip(":")
                words[at + 1] = "127.0.0.1:0"
        if "--listen" not in shown:
            words += ["--listen", "127.0.0.1:0"]
        server = subprocess.Popen(words, cwd=self.workdir, env=self.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        try:
            real, printed = {}, []
            wanted = {"--listen": r"listening on (\S+:\d+)", "--metrics-listen": r"metrics on http://(\S+:\d+)/"}
            pending = b""  # read unbuffered: select() does not see lines a buffered reader holds
            while set(real) != {"--listen", *shown}:
                poller = select.poll()  # (not select: this process may hold more than 1024 descriptors)
                poller.register(server.stdout, select.POLLIN)
                ready = poller.poll(SERVE_TIMEOUT_S * 1000)
                chunk = os.read(server.stdout.fileno(), 4096) if ready else b""
                assert chunk, (f"{block.where}: `{command}` printed {printed} and stopped there; stderr: "
                               f"{server.stderr.read() if server.poll() is not None else ''}")
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in map(bytes.decode, lines):
                    printed.append(line)
                    for option, pattern in wanted.items():
                        matched = re.search(pattern, line)
                        if matched and option not in real:
                            real[option] = matched.group(1)
            text = rest
            for option, address in shown.items():
                text = text.replace(address, real[option])
            {"python": self.run_python, "shell": self.run_shell, "console": self.run_console}[block.kind](block, text)
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                code = server.wait(SERVE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(SERVE_TIMEOUT_S)
                raise
            finally:
                server.stdout.close()
                server.stderr.close()
        assert code == 0, f"{block.where}: the server exited {code} on SIGTERM"
